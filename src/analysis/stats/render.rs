//! The tables as terminal text, Markdown and CSV. Pure.
//!
//! Keys (agent labels, task ids, repository names) are free-form text from whoever wrote the
//! submissions file: control characters are replaced everywhere, and `|` is escaped in Markdown.

use std::fmt::Write;

use super::{CategoryRow, Row, Stats, Tally};
use crate::grading::Category;

/// One table of [`Stats`], for CSV.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    Overall,
    Agents,
    Tasks,
    Repositories,
    Categories,
}

fn clean(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '\u{FFFD}' } else { c })
        .collect()
}

fn pct(rate: Option<f64>) -> String {
    rate.map_or_else(|| "-".to_owned(), |r| format!("{:.1} %", r * 100.0))
}

/// Categories in their canonical order, without `infra`.
fn agent_categories() -> impl Iterator<Item = Category> {
    Category::ALL.into_iter().filter(|c| *c != Category::Infra)
}

/// The terminal form: a headline, then one aligned table per grouping.
pub fn render_text(stats: &Stats) -> String {
    let mut out = String::new();
    let o = &stats.overall;
    let _ = writeln!(
        out,
        "resolved {} of {} graded ({}); {} tampered; {} flaky; {} infra error(s), not counted",
        o.resolved,
        o.graded,
        pct(o.resolved_rate),
        o.tampered,
        o.flaky,
        o.infra_errors
    );
    let _ = writeln!(
        out,
        "passed every official test but rejected by probes: {} of {} ({})",
        o.rejected_by_probes,
        o.official_passed,
        pct(o.rejected_by_probes_share)
    );
    for (title, rows) in [
        ("agent", &stats.by_agent),
        ("task", &stats.by_task),
        ("repository", &stats.by_repository),
    ] {
        out.push('\n');
        text_table(&mut out, title, rows);
    }
    out.push('\n');
    text_categories(&mut out, &stats.categories);
    out
}

fn text_table(out: &mut String, title: &str, rows: &[Row]) {
    let header = [
        title,
        "graded",
        "resolved",
        "rate",
        "official ok",
        "probes rejected",
        "flaky",
        "infra",
    ];
    let body: Vec<[String; 8]> = rows
        .iter()
        .map(|r| {
            let t = &r.tally;
            [
                clean(&r.key),
                t.graded.to_string(),
                t.resolved.to_string(),
                pct(t.resolved_rate),
                t.official_passed.to_string(),
                format!(
                    "{} ({})",
                    t.rejected_by_probes,
                    pct(t.rejected_by_probes_share)
                ),
                t.flaky.to_string(),
                t.infra_errors.to_string(),
            ]
        })
        .collect();
    aligned(out, &header.map(str::to_owned), &body);
}

fn text_categories(out: &mut String, rows: &[CategoryRow]) {
    let mut header = vec![
        "repository".to_owned(),
        "graded".to_owned(),
        "unresolved".to_owned(),
    ];
    header.extend(agent_categories().map(|c| c.as_str().to_owned()));
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut row = vec![
                clean(&r.repository),
                r.graded.to_string(),
                r.unresolved.to_string(),
            ];
            row.extend(agent_categories().map(|c| {
                r.categories
                    .get(c.as_str())
                    .copied()
                    .unwrap_or(0)
                    .to_string()
            }));
            row
        })
        .collect();
    aligned(out, &header, &body);
}

/// Left-aligned first column, right-aligned numbers, two spaces apart.
fn aligned<R: AsRef<[String]>>(out: &mut String, header: &[String], body: &[R]) {
    let width = |i: usize| {
        body.iter()
            .map(|r| r.as_ref()[i].chars().count())
            .chain([header[i].chars().count()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..header.len()).map(width).collect();
    let line = |out: &mut String, cells: &[String]| {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i == 0 {
                let _ = write!(text, "{cell:<w$}", w = widths[0]);
            } else {
                let _ = write!(text, "  {cell:>w$}", w = widths[i]);
            }
        }
        let _ = writeln!(out, "{}", text.trim_end());
    };
    line(out, header);
    for r in body {
        line(out, r.as_ref());
    }
}

fn md_cell(text: &str) -> String {
    clean(text).replace('\\', "\\\\").replace('|', "\\|")
}

/// The Markdown form, for report.md.
pub fn render_markdown(stats: &Stats) -> String {
    let mut out = String::new();
    let o = &stats.overall;
    let _ = writeln!(
        out,
        "**Resolved: {} of {} graded ({})**; {} tampered; {} flaky (a result that changed on a rerun, never a pass); {} infra error(s), not counted against any agent.\n",
        o.resolved,
        o.graded,
        pct(o.resolved_rate),
        o.tampered,
        o.flaky,
        o.infra_errors
    );
    let _ = writeln!(
        out,
        "Passed every official test but rejected by probes: **{} of {} ({})**.",
        o.rejected_by_probes,
        o.official_passed,
        pct(o.rejected_by_probes_share)
    );
    for (title, heading, rows) in [
        ("agent", "Per agent", &stats.by_agent),
        ("task", "Per task", &stats.by_task),
        ("repository", "Per repository", &stats.by_repository),
    ] {
        let _ = writeln!(
            out,
            "\n## {heading}\n\n| {title} | graded | resolved | rate | official ok | probes rejected | flaky | infra errors |\n|---|---:|---:|---:|---:|---:|---:|---:|"
        );
        for r in rows {
            let t = &r.tally;
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} ({}) | {} | {} |",
                md_cell(&r.key),
                t.graded,
                t.resolved,
                pct(t.resolved_rate),
                t.official_passed,
                t.rejected_by_probes,
                pct(t.rejected_by_probes_share),
                t.flaky,
                t.infra_errors
            );
        }
    }
    let names: Vec<&str> = agent_categories().map(Category::as_str).collect();
    let _ = writeln!(
        out,
        "\n## Failure categories per repository\n\nGraded submissions with at least one failure of each category.\n\n| repository | graded | unresolved | {} |\n|---|---:|---:|{}",
        names.join(" | "),
        "---:|".repeat(names.len())
    );
    for r in &stats.categories {
        let counts: Vec<String> = names
            .iter()
            .map(|n| r.categories.get(*n).copied().unwrap_or(0).to_string())
            .collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            md_cell(&r.repository),
            r.graded,
            r.unresolved,
            counts.join(" | ")
        );
    }
    out
}

/// A CSV field (RFC 4180: quoted when it holds a comma or a quote; control characters replaced).
fn csv_field(text: &str) -> String {
    let text = clean(text);
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text
    }
}

fn csv_rate(rate: Option<f64>) -> String {
    rate.map_or_else(String::new, |r| format!("{r:.4}"))
}

const TALLY_COLUMNS: &str = "submissions,graded,resolved,unresolved,tampered,infra_errors,resolved_rate,official_passed,rejected_by_probes,rejected_by_probes_share,flaky";

fn csv_tally(t: &Tally) -> String {
    format!(
        "{},{},{},{},{},{},{},{},{},{},{}",
        t.submissions,
        t.graded,
        t.resolved,
        t.unresolved,
        t.tampered,
        t.infra_errors,
        csv_rate(t.resolved_rate),
        t.official_passed,
        t.rejected_by_probes,
        csv_rate(t.rejected_by_probes_share),
        t.flaky
    )
}

/// One table as CSV, with a header line.
pub fn render_csv(stats: &Stats, table: Table) -> String {
    let mut out = String::new();
    let rows = |out: &mut String, key: &str, rows: &[Row]| {
        let _ = writeln!(out, "{key},{TALLY_COLUMNS}");
        for r in rows {
            let _ = writeln!(out, "{},{}", csv_field(&r.key), csv_tally(&r.tally));
        }
    };
    match table {
        Table::Overall => {
            let _ = writeln!(out, "{TALLY_COLUMNS}\n{}", csv_tally(&stats.overall));
        }
        Table::Agents => rows(&mut out, "agent", &stats.by_agent),
        Table::Tasks => rows(&mut out, "task", &stats.by_task),
        Table::Repositories => rows(&mut out, "repository", &stats.by_repository),
        Table::Categories => {
            let names: Vec<&str> = agent_categories().map(Category::as_str).collect();
            let _ = writeln!(out, "repository,graded,unresolved,{}", names.join(","));
            for r in &stats.categories {
                let counts: Vec<String> = names
                    .iter()
                    .map(|n| r.categories.get(*n).copied().unwrap_or(0).to_string())
                    .collect();
                let _ = writeln!(
                    out,
                    "{},{},{},{}",
                    csv_field(&r.repository),
                    r.graded,
                    r.unresolved,
                    counts.join(",")
                );
            }
        }
    }
    out
}
