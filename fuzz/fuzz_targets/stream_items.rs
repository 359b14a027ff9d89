#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| brmcp_clientrpc::fuzzing::stream_items(data));
