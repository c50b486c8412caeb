module github.com/loadext/loadext/benchmarks/reference

go 1.22
