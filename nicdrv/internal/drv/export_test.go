package drv

// PollSpin is pollSpin, for the polling wait's test.
const PollSpin = pollSpin
