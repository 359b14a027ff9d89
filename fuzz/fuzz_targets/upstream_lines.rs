#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| brmcp::fuzzing::upstream_lines(data));
