package onnx

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"

	ort "github.com/yalue/onnxruntime_go"
	"go.uber.org/zap"
)

// Provider names an execution provider choice.
type Provider string

const (
	// ProviderCPU runs on ONNX Runtime's CPU provider; always available.
	ProviderCPU Provider = "cpu"
	// ProviderCUDA runs on ONNX Runtime's CUDA provider plugin; an error when it cannot.
	ProviderCUDA Provider = "cuda"
	// ProviderAuto tries CUDA and falls back to CPU, saying so in the log.
	ProviderAuto Provider = "auto"
)

// cudaPluginFile is the CUDA execution provider plugin's file name in the cache folder.
const cudaPluginFile = "libonnxruntime_providers_cuda.so"

// cudaEPName is the name ONNX Runtime's CUDA plugin reports for its devices.
const cudaEPName = "CUDAExecutionProvider"

func (p Provider) validate() error {
	switch p {
	case ProviderCPU, ProviderCUDA, ProviderAuto:
		return nil
	}
	return fmt.Errorf("%w: Provider %q; choose cpu, cuda or auto", ErrConfig, string(p))
}

// ParseProvider parses "cpu", "cuda" or "auto".
func ParseProvider(s string) (Provider, error) {
	p := Provider(s)
	return p, p.validate()
}

// cudaDefaults are the CUDA execution provider options towerrl sets where
// Config.CUDAOptions does not name them. cudnn_conv_algo_search HEURISTIC takes cuDNN's
// heuristic choice of convolution algorithm instead of ONNX Runtime's default EXHAUSTIVE
// benchmark at the first run of each shape: on the H200 the benchmark chose algorithms that
// ran the Nature-CNN fixture 2.5 times slower at batch 4096 (29.5 ms a run against 12.0;
// 10.7 against 6.1 at 2048) and no faster at batch 1 to 1024 (docs/GPU.md).
var cudaDefaults = map[string]string{"cudnn_conv_algo_search": "HEURISTIC"}

// cudaRegistered records the CUDA plugin registration, which is once per process; it is
// guarded by runtime.mu.
var cudaRegistered string

// appendProvider configures opts for cfg.Provider and reports the provider in effect.
func appendProvider(opts *ort.SessionOptions, cfg Config) (Provider, error) {
	if cfg.Provider == ProviderCPU {
		return ProviderCPU, nil
	}
	err := appendCUDA(opts, cfg.CUDAProviderLibrary, cfg.CUDAOptions)
	if err == nil {
		return ProviderCUDA, nil
	}
	if cfg.Provider == ProviderAuto {
		cfg.Logger.Info("CUDA execution provider unavailable; falling back to CPU", zap.Error(err))
		return ProviderCPU, nil
	}
	return "", err
}

func appendCUDA(opts *ort.SessionOptions, plugin string, options map[string]string) error {
	if plugin == "" {
		dir, err := CacheDir()
		if err != nil {
			return fmt.Errorf("%w: cuda: %v", ErrProvider, err)
		}
		plugin = filepath.Join(dir, cudaPluginFile)
	}
	if _, err := os.Stat(plugin); err != nil {
		return fmt.Errorf("%w: cuda: the CUDA execution provider library %s is missing (run `make gpu-setup`, or set Config.CUDAProviderLibrary)",
			ErrProvider, plugin)
	}
	runtime.mu.Lock()
	defer runtime.mu.Unlock()
	if cudaRegistered == "" {
		if err := ort.RegisterExecutionProviderLibrary(cudaEPName, plugin); err != nil {
			return fmt.Errorf("%w: cuda: registering %s (are the CUDA 13 libraries libcudart, libcublas, libcudnn on LD_LIBRARY_PATH?): %v",
				ErrProvider, plugin, err)
		}
		cudaRegistered = plugin
	}
	devices, err := ort.GetEpDevices()
	if err != nil {
		return fmt.Errorf("%w: cuda: listing execution provider devices: %v", ErrProvider, err)
	}
	var cuda []ort.EpDevice
	for _, d := range devices {
		if d.EpName() == cudaEPName {
			cuda = append(cuda, d)
		}
	}
	if len(cuda) == 0 {
		return fmt.Errorf("%w: cuda: the CUDA provider found no GPU (no device, or the NVIDIA driver is missing or too old for CUDA 13)", ErrProvider)
	}
	merged := maps.Clone(cudaDefaults)
	maps.Copy(merged, options)
	if err := opts.AppendExecutionProviderV2(cuda[:1], merged); err != nil {
		if len(options) > 0 {
			return fmt.Errorf("%w: cuda: with the options %v (Config.CUDAOptions): %v", ErrProvider, options, err)
		}
		return fmt.Errorf("%w: cuda: %v", ErrProvider, err)
	}
	return nil
}
