//! `brmcp bridge token`: the bearer token agents present.

use std::path::Path;
use std::process::ExitCode;

use super::{TokenAction, load, save};
use crate::bridge::SETTINGS_FILE;
use crate::cli::CliError;
use crate::cli::table::print_json;

/// Prints the token of `datadir`'s settings, made first when there is none or when
/// `action` rotates it.
pub(super) fn run(datadir: &Path, action: TokenAction) -> Result<ExitCode, CliError> {
    let settings_path = datadir.join(SETTINGS_FILE);
    let mut settings = load(&settings_path)?;
    if matches!(action, TokenAction::Rotate) || settings.token.is_empty() {
        settings.token = new_token()?;
        save(datadir, &settings_path, &settings)?;
    }
    if matches!(action, TokenAction::Show { json: true }) {
        print_json(&serde_json::json!({"token": settings.token}));
    } else {
        println!("{}", settings.token);
    }
    Ok(ExitCode::SUCCESS)
}

fn new_token() -> Result<String, CliError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| CliError(format!("entropy: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
