module github.com/gonccl/nccl

go 1.25.0

require github.com/ebitengine/purego v0.11.3

require golang.org/x/sys v0.47.0
