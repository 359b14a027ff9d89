//! Generates the clientrpc message types from `proto/clientrpc.proto`: protox compiles
//! the file in Rust (no `protoc`), prost writes the structs, and each message derives
//! prost-reflect's `ReflectMessage` so its protojson form comes from the descriptors.

use std::path::PathBuf;

use prost::Message as _;

const PROTO: &str = "proto/clientrpc.proto";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed={PROTO}");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR not set")?);
    let fds = protox::compile([PROTO], ["proto"])?;
    std::fs::write(out.join("clientrpc.bin"), fds.encode_to_vec())?;

    let mut config = prost_build::Config::new();
    for file in &fds.file {
        let package = file.package();
        for message in &file.message_type {
            let full_name = format!("{package}.{}", message.name());
            config
                .type_attribute(&full_name, "#[derive(::prost_reflect::ReflectMessage)]")
                .type_attribute(
                    &full_name,
                    format!(
                        r#"#[prost_reflect(descriptor_pool = "crate::proto::DESCRIPTORS", message_name = "{full_name}")]"#
                    ),
                );
        }
    }
    config.compile_fds(fds)?;
    Ok(())
}
