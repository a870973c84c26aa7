//go:build !race

package grafana_test

const raceEnabled = false
