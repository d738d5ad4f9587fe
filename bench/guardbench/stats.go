package main

import (
	"slices"
	"time"
)

// pct returns the p-th percentile of d (p 100: the largest).
func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s) - 1) * p / 100
	return s[i]
}

func mean(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	var t time.Duration
	for _, x := range d {
		t += x
	}
	return t / time.Duration(len(d))
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

// short rounds d to three significant digits for printing.
func short(d time.Duration) time.Duration {
	for u := time.Nanosecond; u < time.Hour; u *= 10 {
		if d < 1000*u {
			return d.Round(u)
		}
	}
	return d.Round(time.Second)
}
