package similarity

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
)

// Summary is one dataset's entry of /validate/'s similarity object
// (docs/similarity.md), in the reference's key order. The averages are on
// the 0–100 scale (kinflow's fix: the reference multiplied by 100 again).
type Summary struct {
	HistogramMax          Histogram[float64] `json:"histogram_max"`
	HistogramMean         Histogram[float64] `json:"histogram_mean"`
	AverageMaxSimilarity  float64            `json:"average_max_similarity"`
	AverageMeanSimilarity float64            `json:"average_mean_similarity"`
	CountMax              Histogram[int]     `json:"count_max"`
	CountMean             Histogram[int]     `json:"count_mean"`
}

// Histogram is an object with the keys "0" … "100" in numeric order.
type Histogram[T int | float64] [101]T

// MarshalJSON writes the 101 keys in order.
func (h Histogram[T]) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, v := range h {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.WriteString(strconv.Itoa(i))
		b.WriteString(`":`)
		switch x := any(v).(type) {
		case int:
			b.WriteString(strconv.Itoa(x))
		case float64:
			f, _ := json.Marshal(x)
			b.Write(f)
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads the object form back (for clients and tests).
func (h *Histogram[T]) UnmarshalJSON(data []byte) error {
	var m map[string]T
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	for k, v := range m {
		if i, err := strconv.Atoi(k); err == nil && i >= 0 && i <= 100 {
			h[i] = v
		}
	}
	return nil
}

// Summarize builds a dataset's summary object from one identity per input row (rows
// with no hit carry 0). A value's bin is its identity rounded half to even,
// as Python's round() does, clamped to 0–100.
func Summarize(rows []Identity) Summary {
	var s Summary
	if len(rows) == 0 {
		return s
	}
	var sumMax, sumMean float64
	for _, r := range rows {
		s.CountMax[bin(r.Max)]++
		s.CountMean[bin(r.Mean)]++
		sumMax += r.Max
		sumMean += r.Mean
	}
	n := float64(len(rows))
	for i := range s.CountMax {
		s.HistogramMax[i] = float64(s.CountMax[i]) / n * 100
		s.HistogramMean[i] = float64(s.CountMean[i]) / n * 100
	}
	s.AverageMaxSimilarity = Round2(sumMax / n)
	s.AverageMeanSimilarity = Round2(sumMean / n)
	return s
}

func bin(v float64) int {
	r := int(math.RoundToEven(v))
	return max(0, min(100, r))
}
