//! `brmcp bridge token`: the bearer tokens agents present. The default agent's token
//! (`show`, `rotate`) is the file's `token`; each agent `add` makes has its own,
//! printed once and kept only as its SHA-256.

use std::path::Path;
use std::process::ExitCode;

use super::{TokenAction, load, save};
use crate::bridge::{AgentEntry, Approver, Caller, SETTINGS_FILE, Settings};
use crate::cli::CliError;
use crate::cli::table::{Table, print_json};

/// Runs `action` on the tokens of `datadir`'s settings.
pub(super) fn run(datadir: &Path, action: TokenAction) -> Result<ExitCode, CliError> {
    let settings_path = datadir.join(SETTINGS_FILE);
    let mut settings = load(&settings_path)?;
    match action {
        TokenAction::Show { .. } | TokenAction::Rotate => {
            if matches!(action, TokenAction::Rotate) || settings.token.is_empty() {
                settings.token = new_token()?;
                save(datadir, &settings_path, &settings)?;
            }
            if matches!(action, TokenAction::Show { json: true }) {
                print_json(&serde_json::json!({"token": settings.token}));
            } else {
                println!("{}", settings.token);
            }
        }
        TokenAction::Add {
            name,
            per_call_cap,
            per_day_cap,
            bots,
            agent_approves,
            json,
        } => {
            if settings.agent(&name).is_some() {
                return Err(CliError(format!(
                    "agent {name:?} exists (`token remove {name}` first)"
                )));
            }
            let mut uids = Vec::with_capacity(bots.len());
            for bot in &bots {
                let uid = settings.resolve(bot).ok_or_else(|| {
                    CliError(format!("no allowed bot {bot:?} (`bots list` lists them)"))
                })?;
                uids.push(uid.to_string());
            }
            let token = new_token()?;
            let approver = if agent_approves {
                Approver::Agent
            } else {
                Approver::User
            };
            let agent = AgentEntry::new(&name, &token, per_call_cap, per_day_cap, uids)
                .with_approver(approver);
            settings.agents.push(agent);
            save(datadir, &settings_path, &settings)?;
            if json {
                print_json(&serde_json::json!({"name": name, "token": token}));
            } else {
                println!("{token}");
                let approves = match approver {
                    Approver::User => "only you approve its payments (the page, `approvals`)",
                    Approver::Agent => "its own client may approve its payments",
                };
                eprintln!("agent {name:?} added; its token is shown only now; {approves}");
            }
        }
        TokenAction::List { json } => list(&settings, json),
        TokenAction::Remove { name } => {
            let before = settings.agents.len();
            settings.agents.retain(|a| a.name != name);
            if settings.agents.len() == before {
                return Err(CliError(format!("no agent named {name:?}")));
            }
            save(datadir, &settings_path, &settings)?;
            println!("agent {name:?} removed");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Who approves `agent`'s payments, as the list shows it.
fn approver(settings: &Settings, agent: &AgentEntry) -> &'static str {
    match settings.approver_of(&Caller::Agent(agent.name.clone())) {
        Approver::User => "user",
        Approver::Agent => "agent",
    }
}

/// The agents with their caps, bots (by name where the user named them) and approver.
fn list(settings: &Settings, json: bool) {
    let bot = |uid: &String| {
        settings
            .bot_names
            .iter()
            .find(|(_, u)| *u == uid)
            .map_or_else(|| uid.clone(), |(n, _)| n.clone())
    };
    if json {
        let rows: Vec<_> = settings
            .agents
            .iter()
            .map(|a| {
                serde_json::json!({
                    "name": a.name,
                    "per_call_cap_atoms": a.per_call_cap_atoms,
                    "per_day_cap_atoms": a.per_day_cap_atoms,
                    "bots": a.bots,
                    "approver": approver(settings, a),
                })
            })
            .collect();
        print_json(&serde_json::json!(rows));
        return;
    }
    if settings.agents.is_empty() {
        println!("no agents (`token add NAME` makes one); the default agent uses `token show`");
        return;
    }
    let mut table = Table::new(&["NAME", "PER CALL", "PER DAY", "BOTS", "APPROVER"]);
    for a in &settings.agents {
        let bots = if a.bots.is_empty() {
            "all allowed".to_owned()
        } else {
            a.bots.iter().map(bot).collect::<Vec<_>>().join(", ")
        };
        table.row(vec![
            a.name.clone(),
            a.per_call_cap_atoms.to_string(),
            a.per_day_cap_atoms.to_string(),
            bots,
            approver(settings, a).to_owned(),
        ]);
    }
    print!("{table}");
}

fn new_token() -> Result<String, CliError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| CliError(format!("entropy: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
