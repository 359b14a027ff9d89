//! `brmcp.json` and `mcpclient.json` as an operator or a user may write them.

use std::collections::BTreeSet;
use std::path::Path;

use crate::bridge::Settings;
use crate::server::ServeConfig;
use crate::server::upstream::{MAX_NAME_LEN, MAX_PRICE_ATOMS, MAX_UPSTREAMS, ToolPrice};

/// Reads `data` as `brmcp.json` (the serving harness's settings, its upstreams and,
/// with the `directory` feature, its registrant block) and as `mcpclient.json` (the
/// bridge's settings).
///
/// - A refusal names the file.
/// - Accepted serve settings are within their bounds: a positive rate; at most
///   [`MAX_UPSTREAMS`] upstreams with distinct names of 1 to [`MAX_NAME_LEN`]
///   characters, each prefixed by its name when there are several; every price at
///   most [`MAX_PRICE_ATOMS`].
/// - Accepted bridge settings are normalized, and written as the bridge saves them,
///   read back the same.
pub fn config_files(data: &[u8]) {
    serve(data);
    bridge(data);
}

fn serve(data: &[u8]) {
    let path = Path::new("brmcp.json");
    // The harness reads the file as UTF-8 text.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let config = match ServeConfig::parse(text, path) {
        Ok(config) => config,
        Err(e) => {
            assert!(e.to_string().contains("brmcp.json"), "unnamed file: {e}");
            return;
        }
    };
    assert!(config.calls_per_minute > 0);
    assert!(config.upstreams.len() <= MAX_UPSTREAMS);
    let several = config.upstreams.len() > 1;
    let mut names = BTreeSet::new();
    for upstream in &config.upstreams {
        assert!(
            (1..=MAX_NAME_LEN).contains(&upstream.name.len()),
            "{upstream:?}"
        );
        assert!(
            names.insert(&upstream.name),
            "two upstreams {:?}",
            upstream.name
        );
        let prefix = if several {
            format!("{}_", upstream.name)
        } else {
            String::new()
        };
        assert_eq!(upstream.prefix, prefix);
        assert!(
            upstream
                .default_price_atoms
                .is_none_or(|p| p <= MAX_PRICE_ATOMS)
        );
        for (tool, price) in &upstream.tools {
            match price {
                ToolPrice::Off | ToolPrice::Atoms(0..=MAX_PRICE_ATOMS) => {}
                ToolPrice::PricedBy { priced_by, bounds } => {
                    assert!(
                        bounds.max_atoms().is_some_and(|max| max <= MAX_PRICE_ATOMS)
                            && bounds.min_atoms() <= MAX_PRICE_ATOMS,
                        "{bounds:?}"
                    );
                    assert_ne!(priced_by, tool, "a tool priced by itself");
                    assert!(upstream.pricing_of(priced_by).is_none(), "a companion sold");
                }
                other => panic!("{other:?}"),
            }
        }
    }
    #[cfg(feature = "directory")]
    if let Err(e) = crate::directory::RegistrantBlock::from_config(&config, path) {
        assert!(e.to_string().contains("brmcp.json"), "unnamed file: {e}");
    }
}

fn bridge(data: &[u8]) {
    let path = Path::new("mcpclient.json");
    let settings = match Settings::parse(path, data) {
        Ok(settings) => settings,
        Err(e) => {
            assert!(
                e.to_string().contains("mcpclient.json"),
                "unnamed file: {e}"
            );
            return;
        }
    };
    let normalized = settings
        .clone()
        .normalized()
        .expect("accepted settings normalize");
    assert_eq!(normalized, settings, "accepted settings are not normalized");
    let saved = serde_json::to_vec_pretty(&settings).expect("settings serialize");
    let again =
        Settings::parse(path, &saved).unwrap_or_else(|e| panic!("saved settings refused: {e}"));
    assert_eq!(again, settings, "saved settings read back otherwise");
}

#[cfg(test)]
mod tests {
    #[test]
    fn config_files_corpus_passes() {
        for (path, data) in super::super::corpus("config_files") {
            eprintln!("config_files: {}", path.display());
            super::config_files(&data);
        }
    }
}
