"""The runtime tracer: intercept real collectives, record, verify across ranks, analyse traces."""
