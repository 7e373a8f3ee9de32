package metrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kinflow/kinflow/internal/fsutil"
)

// RegisterMediaFree exports kinflow_media_free_bytes and
// kinflow_media_size_bytes: the free space and size of the file system
// that holds the media root, read at each scrape (issue 33). A second
// registration (another server on the same registry) is a no-op.
func (m *Metrics) RegisterMediaFree(root string) error {
	if m == nil || root == "" {
		return nil
	}
	read := func(total bool) func() float64 {
		return func() float64 {
			free, size, err := fsutil.FreeBytes(root)
			if err != nil {
				return -1
			}
			if total {
				return float64(size)
			}
			return float64(free)
		}
	}
	for _, g := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "media_free_bytes",
			Help: "Free space (for unprivileged writers) of the file system holding the media root; -1 when it cannot be read."}, read(false)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "media_size_bytes",
			Help: "Size of the file system holding the media root; -1 when it cannot be read."}, read(true)),
	} {
		if err := m.Registry.Register(g); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				continue
			}
			return fmt.Errorf("register media gauges: %w", err)
		}
	}
	return nil
}
