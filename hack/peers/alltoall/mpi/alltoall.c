/*
 * MPI_Alltoall timed the way `mxbench alltoall` times its rounds, so the two
 * tables compare like with like: per size, WARMUP untimed rounds, a barrier,
 * then ITERS timed rounds; every rank divides its own elapsed time by ITERS,
 * and rank 0 prints the fastest, mean and slowest rank's time per round.
 * ITERS follows mxbench's rule: 1000, or fewer (at least 10) when a rank
 * would send more than 256 MiB for the size. A2A_ROUNDS in the environment
 * (mpirun -x A2A_ROUNDS) gives every size that many timed rounds instead,
 * as mxbench's --iterations does: for counting system calls and context
 * switches per round over more rounds than the start-up costs.
 *
 * usage: mpirun -np N alltoall WARMUP SIZE...
 * prints one line per size: size iters t_min_us t_avg_us t_max_us
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long rounds_for(long size, int ranks)
{
	long per_round = size * (ranks > 1 ? ranks - 1 : 1);
	long budget = 256L << 20;

	if (per_round > 0 && per_round * 1000 > budget) {
		long r = budget / per_round;
		return r < 10 ? 10 : r;
	}
	return 1000;
}

int main(int argc, char **argv)
{
	int rank, ranks, warmup, i, k;
	long biggest = 0;
	char *out, *in;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &ranks);
	if (argc < 3) {
		if (rank == 0)
			fprintf(stderr, "usage: %s WARMUP SIZE...\n", argv[0]);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	warmup = atoi(argv[1]);
	if (getenv("A2A_ROUNDS") && atol(getenv("A2A_ROUNDS")) < 1) {
		if (rank == 0)
			fprintf(stderr, "A2A_ROUNDS=%s: want 1 or more rounds\n", getenv("A2A_ROUNDS"));
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	for (i = 2; i < argc; i++) {
		long s = atol(argv[i]);
		if (s < 0) {
			if (rank == 0)
				fprintf(stderr, "size %s: want 0 or more bytes\n", argv[i]);
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
		if (s > biggest)
			biggest = s;
	}
	out = malloc((size_t)biggest * ranks + 1);
	in = malloc((size_t)biggest * ranks + 1);
	if (out == NULL || in == NULL) {
		fprintf(stderr, "rank %d: cannot allocate 2 x %ld bytes\n", rank, biggest * ranks);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	memset(out, rank & 0xff, (size_t)biggest * ranks + 1);
	memset(in, 0, (size_t)biggest * ranks + 1);
	for (i = 2; i < argc; i++) {
		int size = atoi(argv[i]);
		long iters = getenv("A2A_ROUNDS") ? atol(getenv("A2A_ROUNDS")) : rounds_for(size, ranks);
		double t0, mine, lo, hi, sum;

		for (k = 0; k < warmup; k++)
			MPI_Alltoall(out, size, MPI_BYTE, in, size, MPI_BYTE, MPI_COMM_WORLD);
		MPI_Barrier(MPI_COMM_WORLD);
		t0 = MPI_Wtime();
		for (k = 0; k < iters; k++)
			MPI_Alltoall(out, size, MPI_BYTE, in, size, MPI_BYTE, MPI_COMM_WORLD);
		mine = (MPI_Wtime() - t0) * 1e6 / (double)iters;
		MPI_Reduce(&mine, &lo, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
		MPI_Reduce(&mine, &hi, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
		MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
		if (rank == 0) {
			printf("%d %ld %.3f %.3f %.3f\n", size, iters, lo, sum / ranks, hi);
			fflush(stdout);
		}
	}
	free(out);
	free(in);
	MPI_Finalize();
	return 0;
}
