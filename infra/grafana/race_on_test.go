//go:build race

package grafana_test

// raceEnabled: the tests run under the race detector, so the sluice binary they start is built
// with it too.
const raceEnabled = true
