#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| brmcp_wire::fuzzing::parse_part(data));
