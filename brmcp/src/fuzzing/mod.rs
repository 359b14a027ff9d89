//! Fuzz harnesses: one plain function per target in `fuzz/fuzz_targets/`.
//!
//! Compiled only under `cfg(fuzzing)` (set by `cargo fuzz`, and by
//! `fuzz/.cargo/config.toml` for a plain `cargo check`) and in this crate's own tests,
//! which replay every file of the committed corpus `fuzz/corpus/<target>/` through the
//! same function. Each harness panics only when a property fails. Each needs the
//! features of the code it drives.

#[cfg(all(feature = "server", feature = "bridge"))]
mod config_files;
#[cfg(feature = "directory")]
mod directory_answers;
#[cfg(feature = "server")]
mod upstream_lines;

#[cfg(all(feature = "server", feature = "bridge"))]
pub use config_files::config_files;
#[cfg(feature = "directory")]
pub use directory_answers::directory_answers;
#[cfg(feature = "server")]
pub use upstream_lines::upstream_lines;

/// Every file of `fuzz/corpus/<target>/`, sorted; the corpus must not be empty.
#[cfg(test)]
fn corpus(target: &str) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    files.sort();
    let out: Vec<_> = files
        .into_iter()
        .filter(|p| p.is_file())
        .map(|p| {
            let data = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, data)
        })
        .collect();
    assert!(!out.is_empty(), "empty corpus {}", dir.display());
    out
}
