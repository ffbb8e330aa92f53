module github.com/towerrl/towerrl

go 1.26.0

require (
	github.com/google/go-cmp v0.7.0
	github.com/sbinet/npyio v0.6.0
	github.com/yalue/onnxruntime_go v1.35.0
	go.uber.org/zap v1.28.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/campoy/embedmd v1.0.0 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	gonum.org/v1/gonum v0.11.0 // indirect
)
