//! GitHub's own OpenAPI description, used to judge every request our code sends and every
//! answer the fake gives. Loaded once per process.
//!
//! OpenAPI 3.0 schemas are JSON Schema draft 4 plus `nullable`; on loading, `nullable: true`
//! becomes a `null` type (or an `anyOf` with `null`), and every local `$ref` is made absolute so
//! that any piece of the document can be compiled on its own, with the whole document
//! registered as the resource those refs point into.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use http::{HeaderMap, Method};
use jsonschema::{Draft, Validator};
use serde_json::{Map, Value};

pub const SPEC_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/github/openapi/api.github.com.trimmed.json"
);
const BASE: &str = "https://api.github.com/openapi.json";
pub const API_VERSION: &str = "2022-11-28";

pub struct Spec {
    doc: Value,
    ops: Vec<Operation>,
    validators: Mutex<HashMap<String, Arc<Validator>>>,
}

pub struct Operation {
    pub method: Method,
    pub template: String,
    pub id: String,
    segments: Vec<Segment>,
    pointer: String,
}

enum Segment {
    Literal(String),
    Param(String),
}

/// An operation matched by a request, with the path parameters it bound.
pub struct Matched<'a> {
    pub op: &'a Operation,
    pub params: HashMap<String, String>,
}

/// The document, parsed and prepared once per process.
pub fn spec() -> &'static Spec {
    static SPEC: OnceLock<Spec> = OnceLock::new();
    SPEC.get_or_init(|| {
        let text = std::fs::read_to_string(SPEC_PATH)
            .unwrap_or_else(|e| panic!("reading the OpenAPI description {SPEC_PATH}: {e}"));
        let raw: Value = serde_json::from_str(&text).expect("the OpenAPI description is JSON");
        Spec::new(prepare(&raw))
    })
}

impl Spec {
    fn new(doc: Value) -> Spec {
        let mut ops = Vec::new();
        for (template, item) in doc["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("path item") {
                let Ok(m) = method.to_ascii_uppercase().parse::<Method>() else {
                    continue;
                };
                if !op.is_object() || method == "parameters" {
                    continue;
                }
                let segments = template
                    .trim_start_matches('/')
                    .split('/')
                    .map(
                        |s| match s.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                            Some(name) => Segment::Param(name.to_string()),
                            None => Segment::Literal(s.to_string()),
                        },
                    )
                    .collect();
                ops.push(Operation {
                    method: m,
                    template: template.clone(),
                    id: op["operationId"].as_str().unwrap_or("?").to_string(),
                    segments,
                    pointer: format!("/paths/{}/{}", escape(template), method),
                });
            }
        }
        Spec {
            doc,
            ops,
            validators: Mutex::new(HashMap::new()),
        }
    }

    /// The operation for `method` and the (percent-decoded) path segments, preferring the
    /// template with the most literal segments.
    pub fn find(&self, method: &Method, segments: &[String]) -> Option<Matched<'_>> {
        let mut best: Option<(usize, Matched<'_>)> = None;
        for op in self.ops.iter().filter(|op| op.method == *method) {
            if op.segments.len() != segments.len() {
                continue;
            }
            let mut params = HashMap::new();
            let mut literals = 0;
            let fits = op
                .segments
                .iter()
                .zip(segments)
                .all(|(seg, got)| match seg {
                    Segment::Literal(l) => {
                        literals += 1;
                        l == got
                    }
                    Segment::Param(name) => {
                        params.insert(name.clone(), got.clone());
                        !got.is_empty()
                    }
                });
            if fits && best.as_ref().is_none_or(|(n, _)| literals > *n) {
                best = Some((literals, Matched { op, params }));
            }
        }
        best.map(|(_, m)| m)
    }

    /// Everything wrong with a request for a matched operation.
    pub fn check_request(
        &self,
        m: &Matched<'_>,
        query: &[(String, String)],
        headers: &HeaderMap,
        body: &[u8],
    ) -> Vec<String> {
        let mut problems = Vec::new();
        let op = self.at(&m.op.pointer);
        let versions: Vec<_> = headers.get_all("x-github-api-version").iter().collect();
        if versions.len() != 1 || versions[0].to_str().ok() != Some(API_VERSION) {
            problems.push(format!(
                "X-GitHub-Api-Version must be exactly {API_VERSION}, got {versions:?}"
            ));
        }
        let agents: Vec<_> = headers.get_all(http::header::USER_AGENT).iter().collect();
        if agents.len() != 1 || agents[0].is_empty() {
            problems.push(format!(
                "exactly one User-Agent is required, got {agents:?}"
            ));
        }

        let mut known_query = Vec::new();
        for (param, pointer) in self.parameters(op, &m.op.pointer) {
            let name = param["name"].as_str().unwrap_or_default();
            let required = param["required"].as_bool().unwrap_or(false);
            let raw = match param["in"].as_str() {
                Some("path") => m.params.get(name).cloned(),
                Some("query") => {
                    known_query.push(name.to_string());
                    let values: Vec<&String> = query
                        .iter()
                        .filter(|(k, _)| k == name)
                        .map(|(_, v)| v)
                        .collect();
                    if values.len() > 1 {
                        problems.push(format!(
                            "query parameter {name} given {} times",
                            values.len()
                        ));
                    }
                    values.first().map(|v| v.to_string())
                }
                Some("header") => headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string),
                _ => None,
            };
            let Some(raw) = raw else {
                if required {
                    problems.push(format!("required parameter {name} is missing"));
                }
                continue;
            };
            let schema_ptr = format!("{pointer}/schema");
            let value = coerce(&raw, self.at(&schema_ptr));
            for e in self.validate(&schema_ptr, &value) {
                problems.push(format!("parameter {name}={raw:?}: {e}"));
            }
        }
        for (k, _) in query {
            if !known_query.contains(k) {
                problems.push(format!("unknown query parameter {k}"));
            }
        }

        match op.get("requestBody") {
            None => {
                if !body.is_empty() {
                    problems.push("a body was sent to an operation that takes none".into());
                }
            }
            Some(request_body) => {
                let (request_body, rb_ptr) =
                    self.deref(request_body, &format!("{}/requestBody", m.op.pointer));
                let required = request_body["required"].as_bool().unwrap_or(false);
                if body.is_empty() {
                    if required {
                        problems.push("the required JSON body is missing".into());
                    }
                } else {
                    let content_type = headers
                        .get(http::header::CONTENT_TYPE)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("");
                    if !content_type.starts_with("application/json") {
                        problems.push(format!(
                            "Content-Type must be application/json, got {content_type:?}"
                        ));
                    }
                    match serde_json::from_slice::<Value>(body) {
                        Err(e) => problems.push(format!("the body is not JSON: {e}")),
                        Ok(value) => {
                            let schema_ptr = format!("{rb_ptr}/content/application~1json/schema");
                            for e in self.validate(&schema_ptr, &value) {
                                problems.push(format!("body: {e}"));
                            }
                        }
                    }
                }
            }
        }
        problems
    }

    /// Everything wrong with an answer the fake is about to give (statuses the operation does
    /// not describe, such as injected 5xx, are not judged).
    pub fn check_response(&self, op: &Operation, status: u16, body: &Value) -> Vec<String> {
        let ptr = format!("{}/responses/{status}", op.pointer);
        let Some(response) = self.doc.pointer(&ptr) else {
            return Vec::new();
        };
        let (response, ptr) = self.deref(response, &ptr);
        if response
            .pointer("/content/application~1json/schema")
            .is_none()
        {
            return Vec::new();
        }
        let schema_ptr = format!("{ptr}/content/application~1json/schema");
        self.validate(&schema_ptr, body)
            .into_iter()
            .map(|e| format!("fake answer {status} to {} is invalid: {e}", op.id))
            .collect()
    }

    /// The value of a named example (`#/components/examples/{name}`), to build answers from.
    pub fn example(&self, name: &str) -> Value {
        self.doc
            .pointer(&format!("/components/examples/{}/value", escape(name)))
            .unwrap_or_else(|| panic!("no example {name} in the OpenAPI description"))
            .clone()
    }

    fn at(&self, pointer: &str) -> &Value {
        self.doc
            .pointer(pointer)
            .unwrap_or_else(|| panic!("nothing at {pointer} in the OpenAPI description"))
    }

    /// Follow a `$ref` (made absolute on loading) to its target and the target's pointer.
    fn deref<'a>(&'a self, value: &'a Value, pointer: &str) -> (&'a Value, String) {
        match value.get("$ref").and_then(Value::as_str) {
            Some(r) => {
                let target = r
                    .strip_prefix(BASE)
                    .and_then(|r| r.strip_prefix('#'))
                    .unwrap_or_else(|| panic!("foreign $ref {r}"));
                self.deref(self.at(target), target)
            }
            None => (value, pointer.to_string()),
        }
    }

    /// The operation's parameters (path-level ones too), each with its pointer.
    fn parameters<'a>(&'a self, op: &'a Value, op_ptr: &str) -> Vec<(&'a Value, String)> {
        let mut out = Vec::new();
        let item_ptr = op_ptr.rsplit_once('/').map_or("", |(item, _)| item);
        for (list, list_ptr) in [
            (
                self.doc.pointer(&format!("{item_ptr}/parameters")),
                format!("{item_ptr}/parameters"),
            ),
            (op.get("parameters"), format!("{op_ptr}/parameters")),
        ] {
            if let Some(Value::Array(items)) = list {
                for (i, p) in items.iter().enumerate() {
                    out.push(self.deref(p, &format!("{list_ptr}/{i}")));
                }
            }
        }
        out
    }

    fn validate(&self, schema_ptr: &str, instance: &Value) -> Vec<String> {
        let validator = self.validator(schema_ptr);
        validator
            .iter_errors(instance)
            .map(|e| {
                let mut text = format!("at {:?}: {e}", e.instance_path.as_str());
                if text.len() > 400 {
                    let mut end = 400;
                    while !text.is_char_boundary(end) {
                        end -= 1;
                    }
                    text.truncate(end);
                    text.push('…');
                }
                text
            })
            .collect()
    }

    fn validator(&self, schema_ptr: &str) -> Arc<Validator> {
        if let Some(v) = self.validators.lock().unwrap().get(schema_ptr) {
            return v.clone();
        }
        let schema = self.at(schema_ptr).clone();
        let validator = jsonschema::options()
            .with_draft(Draft::Draft4)
            .should_validate_formats(true)
            .with_resource(BASE, Draft::Draft4.create_resource(self.doc.clone()))
            .build(&schema)
            .unwrap_or_else(|e| panic!("compiling the schema at {schema_ptr}: {e}"));
        let validator = Arc::new(validator);
        self.validators
            .lock()
            .unwrap()
            .insert(schema_ptr.to_string(), validator.clone());
        validator
    }
}

/// A query or path value as the JSON its schema expects.
fn coerce(raw: &str, schema: &Value) -> Value {
    match schema.get("type").and_then(Value::as_str) {
        Some("integer") | Some("number") => raw
            .parse::<i64>()
            .map(Value::from)
            .or_else(|_| raw.parse::<f64>().map(Value::from))
            .unwrap_or_else(|_| Value::String(raw.to_string())),
        Some("boolean") => match raw {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => Value::String(raw.to_string()),
        },
        Some(_) => Value::String(raw.to_string()),
        None => raw
            .parse::<i64>()
            .map(Value::from)
            .unwrap_or_else(|_| Value::String(raw.to_string())),
    }
}

/// JSON-pointer escaping of one reference token.
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// OpenAPI 3.0 → JSON Schema draft 4: `nullable`, and absolute `$ref`s. Examples are data and
/// left alone.
fn prepare(value: &Value) -> Value {
    match value {
        Value::Array(items) => Value::Array(items.iter().map(prepare).collect()),
        Value::Object(map) => {
            let mut out = Map::new();
            for (k, v) in map {
                let v = match (k.as_str(), v) {
                    ("example" | "examples", _) => prepare_examples(k, v),
                    ("properties", Value::Object(props)) => {
                        Value::Object(props.iter().map(|(p, s)| (p.clone(), prepare(s))).collect())
                    }
                    ("$ref", Value::String(r)) if r.starts_with('#') => {
                        Value::String(format!("{BASE}{r}"))
                    }
                    _ => prepare(v),
                };
                out.insert(k.clone(), v);
            }
            if out.get("nullable") == Some(&Value::Bool(true)) {
                out.remove("nullable");
                match out.get("type").cloned() {
                    Some(Value::String(t)) => {
                        out.insert("type".into(), serde_json::json!([t, "null"]));
                        if let Some(Value::Array(e)) = out.get_mut("enum")
                            && !e.contains(&Value::Null)
                        {
                            e.push(Value::Null);
                        }
                    }
                    _ => {
                        return serde_json::json!({
                            "anyOf": [Value::Object(out), {"type": "null"}]
                        });
                    }
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

/// Under `components/examples` the entries are `{summary, value}` objects whose `value` is data;
/// under a media type, `examples` maps names to such objects or `$ref`s. Keep data as it is, but
/// make the refs absolute like all others.
fn prepare_examples(key: &str, value: &Value) -> Value {
    if key == "example" {
        return value.clone();
    }
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(name, ex)| {
                    let ex = match ex.get("$ref").and_then(Value::as_str) {
                        Some(r) if r.starts_with('#') => {
                            serde_json::json!({"$ref": format!("{BASE}{r}")})
                        }
                        _ => ex.clone(),
                    };
                    (name.clone(), ex)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}
