#include <stdio.h>
#include <myriexpress.h>
int main(void) {
	mx_endpoint_t ep; mx_endpoint_addr_t me, peer; mx_request_t s, r; mx_status_t st;
	uint64_t nic; uint32_t eid, done; char out[] = "hello", in[8];
	mx_segment_t sseg = {out, sizeof out}, rseg = {in, sizeof in};
	mx_init();                                      /* opens the boards of GOMX_BOARDS */
	mx_open_endpoint(0, MX_ANY_ENDPOINT, 0x1234, NULL, 0, &ep);
	mx_get_endpoint_addr(ep, &me);
	mx_decompose_endpoint_addr(me, &nic, &eid);
	mx_connect(ep, nic, eid, 0x1234, 1000, &peer);  /* any NIC id and endpoint: here, itself */
	mx_irecv(ep, &rseg, 1, 42, MX_MATCH_MASK_NONE, NULL, &r);
	mx_isend(ep, &sseg, 1, peer, 42, NULL, &s);
	mx_wait(ep, &s, MX_INFINITE, &st, &done);
	mx_wait(ep, &r, MX_INFINITE, &st, &done);
	printf("received \"%s\" (%u bytes)\n", in, st.xfer_length);
	mx_close_endpoint(ep);
	return mx_finalize();
}
