//! The tools, resources and prompts the MCP conformance suite's server scenarios call
//! (`@modelcontextprotocol/conformance`, as its scenario descriptions specify), served
//! as a Bison Relay bot so the suite tests the whole path: bridge endpoint, PMs, bot.

use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    ContentBlock, CreateMessageRequestParams, ElicitRequest, ElicitRequestParams, ElicitResult,
    ErrorData, GetPromptRequestParams, GetPromptResponse, GetPromptResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, LoggingLevel,
    LoggingMessageNotificationParam, PaginatedRequestParams, ProgressNotificationParam,
    PromptMessage, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    ResourceContents, Role, SamplingMessage, ServerCapabilities, ServerConfig, ServerRequest,
    SetLevelRequestParams, SubscribeRequestParams, Tool, UnsubscribeRequestParams,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Value, json};

/// A 1x1 red PNG.
pub const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

/// A minimal WAV file (44-byte header, one silent 8-bit sample).
pub const WAV: &str = "UklGRiUAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQEAAACA";

/// The conformance suite's fixture server.
#[derive(Debug, Clone, Default)]
pub struct ConformanceBot;

fn tools() -> Vec<Tool> {
    let empty = json!({"type": "object", "properties": {}});
    let tools = json!([
        {"name": "test_simple_text", "description": "Returns simple text", "inputSchema": empty},
        {"name": "test_image_content", "description": "Returns an image", "inputSchema": empty},
        {"name": "test_audio_content", "description": "Returns audio", "inputSchema": empty},
        {"name": "test_embedded_resource", "description": "Returns an embedded resource", "inputSchema": empty},
        {"name": "test_multiple_content_types", "description": "Returns mixed content", "inputSchema": empty},
        {"name": "test_tool_with_logging", "description": "Logs while it runs", "inputSchema": empty},
        {"name": "test_error_handling", "description": "Always fails", "inputSchema": empty},
        {"name": "test_tool_with_progress", "description": "Reports progress", "inputSchema": empty},
        {"name": "test_sampling", "description": "Asks the client's model",
         "inputSchema": {"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]}},
        {"name": "test_elicitation", "description": "Asks the user",
         "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}},
        {"name": "test_elicitation_sep1034_defaults", "description": "Elicitation with defaults", "inputSchema": empty},
        {"name": "test_elicitation_sep1330_enums", "description": "Elicitation with enums", "inputSchema": empty},
        {"name": "json_schema_2020_12_tool", "description": "Tool with JSON Schema 2020-12 features",
         "inputSchema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {"address": {"$anchor": "addressDef", "type": "object",
                "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
            "properties": {
                "name": {"type": "string"},
                "address": {"$ref": "#/$defs/address"},
                "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                "phone": {"type": "string"},
                "email": {"type": "string"}
            },
            "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
            "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
            "then": {"required": ["phone"]},
            "else": {"required": ["email"]},
            "additionalProperties": false
         }}
    ]);
    serde_json::from_value(tools).expect("fixture tools")
}

fn text(t: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(t)])
}

impl ConformanceBot {
    async fn elicit(
        &self,
        ctx: &RequestContext<RoleServer>,
        message: &str,
        schema: Value,
        prefix: &str,
    ) -> Result<CallToolResult, ErrorData> {
        let params: ElicitRequestParams = serde_json::from_value(json!({
            "message": message,
            "requestedSchema": schema,
        }))
        .map_err(|e| ErrorData::internal_error(format!("elicitation schema: {e}"), None))?;
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
        let answer = ctx.peer.send_request(request).await.map(|r| {
            serde_json::to_value(r)
                .and_then(serde_json::from_value::<ElicitResult>)
                .map_err(|e| e.to_string())
        });
        match answer {
            Ok(Ok(answer)) => {
                let action = serde_json::to_value(&answer.action).unwrap_or(Value::Null);
                let content = answer.content.unwrap_or(Value::Null);
                Ok(text(format!(
                    "{prefix}action={}, content={content}",
                    action.as_str().unwrap_or("unknown")
                )))
            }
            Ok(Err(e)) => Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "elicitation failed: {e}"
            ))])),
            Err(e) => Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "elicitation failed: {e}"
            ))])),
        }
    }
}

impl ServerHandler for ConformanceBot {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_prompts()
                .enable_completions()
                .enable_logging()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.clone().unwrap_or_default();
        let arg = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let result = match request.name.as_ref() {
            "test_simple_text" => text("This is a simple text response for testing."),
            "test_image_content" => {
                CallToolResult::success(vec![ContentBlock::image(PNG, "image/png")])
            }
            "test_audio_content" => {
                CallToolResult::success(vec![ContentBlock::audio(WAV, "audio/wav")])
            }
            "test_embedded_resource" => CallToolResult::success(vec![ContentBlock::resource(
                ResourceContents::text(
                    "This is an embedded resource content.",
                    "test://embedded-resource",
                )
                .with_mime_type("text/plain"),
            )]),
            "test_multiple_content_types" => CallToolResult::success(vec![
                ContentBlock::text("Multiple content types test:"),
                ContentBlock::image(PNG, "image/png"),
                ContentBlock::resource(
                    ResourceContents::text(
                        r#"{"test":"data","value":123}"#,
                        "test://mixed-content-resource",
                    )
                    .with_mime_type("application/json"),
                ),
            ]),
            "test_tool_with_logging" => {
                for (i, line) in [
                    "Tool execution started",
                    "Tool processing data",
                    "Tool execution completed",
                ]
                .into_iter()
                .enumerate()
                {
                    if i > 0 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    let _ = ctx
                        .peer
                        .notify_logging_message(LoggingMessageNotificationParam::new(
                            LoggingLevel::Info,
                            json!(line),
                        ))
                        .await;
                }
                text("Tool with logging executed successfully")
            }
            "test_error_handling" => CallToolResult::error(vec![ContentBlock::text(
                "This tool intentionally returns an error for testing",
            )]),
            "test_tool_with_progress" => {
                let token = ctx.meta.get_progress_token();
                for (i, p) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                    if i > 0 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    if let Some(token) = &token {
                        let _ = ctx
                            .peer
                            .notify_progress(
                                ProgressNotificationParam::new(token.clone(), p).with_total(100.0),
                            )
                            .await;
                    }
                }
                text("Tool with progress executed successfully")
            }
            "test_sampling" => {
                let params = CreateMessageRequestParams::new(
                    vec![SamplingMessage::user_text(arg("prompt"))],
                    100,
                );
                match ctx.peer.create_message(params).await {
                    Ok(answer) => {
                        let reply =
                            serde_json::to_value(&answer.message).unwrap_or(Value::Null)["content"]
                                ["text"]
                                .as_str()
                                .unwrap_or("")
                                .to_owned();
                        text(format!("LLM response: {reply}"))
                    }
                    Err(e) => CallToolResult::error(vec![ContentBlock::text(format!(
                        "sampling failed: {e}"
                    ))]),
                }
            }
            "test_elicitation" => {
                let schema = json!({
                    "type": "object",
                    "properties": {
                        "username": {"type": "string", "description": "User's response"},
                        "email": {"type": "string", "description": "User's email address"}
                    },
                    "required": ["username", "email"]
                });
                return Ok(self
                    .elicit(&ctx, &arg("message"), schema, "User response: ")
                    .await?
                    .into());
            }
            "test_elicitation_sep1034_defaults" => {
                let schema = json!({
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "default": "John Doe"},
                        "age": {"type": "integer", "default": 30},
                        "score": {"type": "number", "default": 95.5},
                        "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
                        "verified": {"type": "boolean", "default": true}
                    }
                });
                return Ok(self
                    .elicit(
                        &ctx,
                        "Please review and update the form fields with defaults",
                        schema,
                        "Elicitation completed: ",
                    )
                    .await?
                    .into());
            }
            "test_elicitation_sep1330_enums" => {
                let schema = json!({
                    "type": "object",
                    "properties": {
                        "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
                        "titledSingle": {"type": "string", "oneOf": [
                            {"const": "value1", "title": "First Option"},
                            {"const": "value2", "title": "Second Option"},
                            {"const": "value3", "title": "Third Option"}
                        ]},
                        "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                                       "enumNames": ["Option One", "Option Two", "Option Three"]},
                        "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                        "titledMulti": {"type": "array", "items": {"anyOf": [
                            {"const": "value1", "title": "First Choice"},
                            {"const": "value2", "title": "Second Choice"},
                            {"const": "value3", "title": "Third Choice"}
                        ]}}
                    }
                });
                return Ok(self
                    .elicit(
                        &ctx,
                        "Please select options from the enum fields",
                        schema,
                        "Elicitation completed: ",
                    )
                    .await?
                    .into());
            }
            "json_schema_2020_12_tool" => text("ok"),
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool {other:?}"),
                    None,
                ));
            }
        };
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(serde_json::from_value(json!({"resources": [
            {"uri": "test://static-text", "name": "static-text", "description": "A static text resource", "mimeType": "text/plain"},
            {"uri": "test://static-binary", "name": "static-binary", "description": "A static binary resource", "mimeType": "image/png"},
            {"uri": "test://watched-resource", "name": "watched-resource", "description": "A resource to subscribe to", "mimeType": "text/plain"}
        ]}))
        .expect("resources"))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(serde_json::from_value(json!({"resourceTemplates": [
            {"uriTemplate": "test://template/{id}/data", "name": "template", "description": "A templated resource", "mimeType": "application/json"}
        ]}))
        .expect("templates"))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri.as_str();
        let contents = match uri {
            "test://static-text" => {
                ResourceContents::text("This is the content of the static text resource.", uri)
                    .with_mime_type("text/plain")
            }
            "test://static-binary" => ResourceContents::blob(PNG, uri).with_mime_type("image/png"),
            "test://watched-resource" => {
                ResourceContents::text("watched", uri).with_mime_type("text/plain")
            }
            _ => match uri
                .strip_prefix("test://template/")
                .and_then(|rest| rest.strip_suffix("/data"))
            {
                Some(id) => ResourceContents::text(
                    json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")})
                        .to_string(),
                    uri,
                )
                .with_mime_type("application/json"),
                None => {
                    return Err(ErrorData::invalid_params(
                        "Resource not found",
                        Some(json!({"uri": uri})),
                    ));
                }
            },
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    async fn subscribe(
        &self,
        _request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }

    async fn unsubscribe(
        &self,
        _request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(serde_json::from_value(json!({"prompts": [
            {"name": "test_simple_prompt", "description": "A simple prompt"},
            {"name": "test_prompt_with_arguments", "description": "A prompt with arguments", "arguments": [
                {"name": "arg1", "description": "First test argument", "required": true},
                {"name": "arg2", "description": "Second test argument", "required": true}
            ]},
            {"name": "test_prompt_with_embedded_resource", "description": "A prompt with a resource", "arguments": [
                {"name": "resourceUri", "description": "URI of the resource to embed", "required": true}
            ]},
            {"name": "test_prompt_with_image", "description": "A prompt with an image"}
        ]}))
        .expect("prompts"))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let args = request.arguments.clone().unwrap_or_default();
        let arg = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let messages = match request.name.as_str() {
            "test_simple_prompt" => vec![PromptMessage::new_text(Role::User, "This is a simple prompt for testing.")],
            "test_prompt_with_arguments" => vec![PromptMessage::new_text(
                Role::User,
                format!("Prompt with arguments: arg1='{}', arg2='{}'", arg("arg1"), arg("arg2")),
            )],
            "test_prompt_with_embedded_resource" => serde_json::from_value(json!([
                {"role": "user", "content": {"type": "resource", "resource": {
                    "uri": arg("resourceUri"), "mimeType": "text/plain", "text": "Embedded resource content for testing."}}},
                {"role": "user", "content": {"type": "text", "text": "Please process the embedded resource above."}}
            ]))
            .expect("messages"),
            "test_prompt_with_image" => serde_json::from_value(json!([
                {"role": "user", "content": {"type": "image", "data": PNG, "mimeType": "image/png"}},
                {"role": "user", "content": {"type": "text", "text": "Please analyze the image above."}}
            ]))
            .expect("messages"),
            other => return Err(ErrorData::invalid_params(format!("unknown prompt {other:?}"), None)),
        };
        Ok(GetPromptResult::new(messages).into())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        Ok(super::complete_from(&["paris", "park", "party"], &request))
    }

    async fn set_level(
        &self,
        _request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }
}
