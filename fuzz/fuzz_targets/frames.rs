#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| brmcp_clientrpc::fuzzing::frames(data));
