module github.com/towerrl/towerrl

go 1.26.0

require (
	github.com/campoy/embedmd v1.0.0 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	github.com/sbinet/npyio v0.6.0 // indirect
	github.com/yalue/onnxruntime_go v1.35.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	go.uber.org/zap v1.28.0 // indirect
	go4.org/unsafe/assume-no-moving-gc v0.0.0-20231121144256-b99613f794b6 // indirect
	golang.org/x/sync v0.24.0 // indirect
	gonum.org/v1/gonum v0.9.3 // indirect
)
