package gpuworker

import (
	"fmt"
	"log/slog"

	"github.com/kinflow/kinflow/internal/config"
)

// LocalActivities builds the step activities for the CPU worker's local
// computation (fail-open): the same activities, executor and layout as a GPU
// host, registered on the CPU task queue.
func LocalActivities(cfg *config.Config, log *slog.Logger) (*Activities, error) {
	st, err := settingsFromConfig(cfg)
	if err != nil {
		return nil, err
	}
	return newActivities(cfg, st, nil, nil, log.With("role", "local-steps")), nil
}

// settingsFromConfig loads the GPU host's env file named by the configuration.
func settingsFromConfig(cfg *config.Config) (*Settings, error) {
	file, err := LoadEnvFile(cfg.GPUEnvFile)
	if err != nil {
		return nil, err
	}
	st, err := LoadSettings(LayeredLookup(file), file, cfg.MediaRoot)
	if err != nil {
		return nil, fmt.Errorf("GPU env file: %w", err)
	}
	return st, nil
}
