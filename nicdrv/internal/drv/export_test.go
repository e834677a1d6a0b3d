package drv

// PollYield is pollYield, for the tests: the looks a polling wait takes
// before it sleeps between looks.
const PollYield = pollYield
