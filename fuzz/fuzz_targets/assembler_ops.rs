#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| brmcp_wire::fuzzing::assembler_ops(data));
