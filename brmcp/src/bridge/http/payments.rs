//! The payments waiting for approval, listed and decided over HTTP. Each listed
//! payment is `{id, bot, tool, atoms, created, agent}`, and for a dynamically priced
//! tool `quote`: the price it was quoted and the bound it is within.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::refusal::plain;
use crate::bridge::Inner;
use crate::bridge::quote::DynamicQuote;

/// A dynamic quote as `/payments` lists it: the quoted price and the bound it was
/// checked within, in atoms (`max_atoms` null when the tool lists no most).
pub(crate) fn quote_json(quoted: &DynamicQuote) -> serde_json::Value {
    serde_json::json!({
        "price_atoms": quoted.price_atoms,
        "min_atoms": quoted.bounds.min_atoms(),
        "max_atoms": quoted.bounds.max_atoms(),
    })
}

/// Where the payments waiting for approval are listed and decided, behind the user's
/// approval secret (never an agent's token): `GET /payments`,
/// `POST /payments/<id>/approve|deny`.
pub(crate) const PAYMENTS_PATH: &str = "/payments";

pub(super) fn payments(inner: &Inner, method: &axum::http::Method, rest: &str) -> Response {
    let json = |status: StatusCode, value: serde_json::Value| {
        (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            value.to_string(),
        )
            .into_response()
    };
    match (method.as_str(), rest.trim_end_matches('/')) {
        ("GET", "") => {
            let list: Vec<serde_json::Value> = inner
                .policy
                .pending()
                .into_iter()
                .map(|p| {
                    let mut row = serde_json::json!({
                        "id": p.id,
                        "bot": p.bot.to_string(),
                        "tool": p.tool,
                        "atoms": p.atoms,
                        "created": p.created.secs(),
                        "agent": p.agent,
                    });
                    if let Some(quoted) = &p.quoted {
                        row["quote"] = quote_json(quoted);
                    }
                    row
                })
                .collect();
            json(StatusCode::OK, serde_json::Value::Array(list))
        }
        ("POST", path) => {
            let Some((id, verb)) = path.strip_prefix('/').and_then(|p| p.rsplit_once('/')) else {
                return plain(StatusCode::NOT_FOUND, "not found");
            };
            let approve = match verb {
                "approve" => true,
                "deny" => false,
                _ => return plain(StatusCode::NOT_FOUND, "not found"),
            };
            if inner.policy.decide(id, approve) {
                json(
                    StatusCode::OK,
                    serde_json::json!({"id": id, "approved": approve}),
                )
            } else {
                plain(StatusCode::NOT_FOUND, "no such payment waiting")
            }
        }
        _ => plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
    }
}
