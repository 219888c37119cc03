//! The `--json` rendering: serde_json of [`Report`], pretty-printed. Schema: docs/grade-json.md.

use super::Report;

pub fn render_json(report: &Report) -> String {
    // Every map in a Report has string keys (or unit-enum keys serialised as strings), so
    // serialisation cannot fail; non-finite floats become `null`.
    serde_json::to_string_pretty(report).expect("a Report always serialises to JSON")
}
