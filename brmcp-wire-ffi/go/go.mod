module github.com/brmcp/brmcp/brmcp-wire-ffi/go

go 1.19
