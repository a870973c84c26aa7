package forecast

import (
	"math"
	"time"
)

// Fit is the least-squares line through one series of the window, y against
// time in seconds. See the package doc for the formulas.
type Fit struct {
	// Slope is the growth rate in the series' unit per second: seconds per
	// second for the lag age, bytes per second for the unconsumed bytes.
	// 0 with fewer than 2 samples or all at one time.
	Slope float64
	// SlopeStdErr is the standard error of Slope; 0 with fewer than 3
	// samples, where it is undefined.
	SlopeStdErr float64
	// R2 is the coefficient of determination, in [0, 1]: the share of the
	// series' variance the line explains. A flat series fits perfectly (1).
	R2 float64
	// ResidualStdDev is the residual standard deviation in the series' unit
	// (seconds or bytes); 0 with fewer than 3 samples.
	ResidualStdDev float64
	// Samples is how many samples the line was fitted to.
	Samples int
	// Span is the time from the first to the last of them.
	Span time.Duration
}

// fitLine fits y = a + b·x, x the seconds since the first sample it uses, to
// the samples in w for which value reports ok. It makes three passes (means,
// centred sums, residuals) so that the sums neither lose precision to large
// offsets nor make an exact line look inexact, and allocates nothing.
func fitLine(w []Sample, value func(Sample) (float64, bool)) Fit {
	var (
		f      Fit
		t0, tn time.Time
		sx, sy float64
	)
	for _, s := range w {
		y, ok := value(s)
		if !ok {
			continue
		}
		if f.Samples == 0 {
			t0 = s.Time
		}
		tn = s.Time
		f.Samples++
		sx += s.Time.Sub(t0).Seconds()
		sy += y
	}
	if f.Samples == 0 {
		return f
	}
	f.Span = tn.Sub(t0)
	n := float64(f.Samples)
	mx, my := sx/n, sy/n

	var sxx, sxy, syy float64
	for _, s := range w {
		y, ok := value(s)
		if !ok {
			continue
		}
		dx, dy := s.Time.Sub(t0).Seconds()-mx, y-my
		sxx += dx * dx
		sxy += dx * dy
		syy += dy * dy
	}
	if sxx == 0 {
		return f
	}
	f.Slope = sxy / sxx

	var sse float64
	for _, s := range w {
		y, ok := value(s)
		if !ok {
			continue
		}
		r := y - my - f.Slope*(s.Time.Sub(t0).Seconds()-mx)
		sse += r * r
	}
	switch {
	case syy == 0 || sse == 0:
		f.R2 = 1
	default:
		f.R2 = math.Max(0, 1-sse/syy)
	}
	if f.Samples >= 3 {
		f.ResidualStdDev = math.Sqrt(sse / (n - 2))
		f.SlopeStdErr = f.ResidualStdDev / math.Sqrt(sxx)
	}
	return f
}
