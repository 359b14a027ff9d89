#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| brmcp_adapters::fuzzing::announcements(data));
