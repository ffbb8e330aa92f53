// Package models defines policy architectures as gorgonia graphs (MLP and CNN trunks,
// categorical and Gaussian heads, value heads), their export to ONNX, and models imported from
// foreign ONNX files for fine-tuning. It never runs environments.
package models
