//! The client bridge: local MCP endpoints for any agent, proxying to Bison Relay bots
//! under the user's spending policy.
