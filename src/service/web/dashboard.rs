//! The operator dashboard (pure): resolved rates per task, repository and agent account over
//! time, the share of official-passing grades that the probes reject, failure categories per
//! repository and per agent, and the queue and engines. Every figure comes from
//! [`crate::analysis::stats`] (the same aggregation as `infradev stats` and run reports).

use chrono::{DateTime, Utc};

use super::html::{Html, page};
use super::svg::{Bar, Line, bar_chart, heatmap, line_chart};
use crate::analysis::stats::{CategoryRow, Period, Row, Stats};
use crate::grading::{Category, Verdict};

/// Jobs of one backend per state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRow {
    pub backend: String,
    pub queued: u64,
    pub running: u64,
    pub finished: u64,
    pub cancelled: u64,
}

/// One finished grade in the recent list.
#[derive(Debug, Clone, PartialEq)]
pub struct RecentGrade {
    pub id: i64,
    pub repo: String,
    pub number: u64,
    pub task_id: String,
    pub author: String,
    /// `None`: it could not be graded (our fault).
    pub verdict: Option<Verdict>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// Everything the dashboard shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Dashboard {
    pub generated_at: DateTime<Utc>,
    /// Over every finished grade read.
    pub stats: Stats,
    /// Failure categories per agent account (the rows' `repository` holds the account).
    pub agent_categories: Vec<CategoryRow>,
    /// The same tables per period, oldest first.
    pub periods: Vec<Period>,
    pub queue: Vec<QueueRow>,
    pub outbox_pending: u64,
    pub refused_deliveries: u64,
    /// Newest first.
    pub recent: Vec<RecentGrade>,
}

fn pct(rate: Option<f64>) -> String {
    rate.map_or_else(|| "-".to_owned(), |r| format!("{:.1} %", r * 100.0))
}

/// Categories an agent can be blamed for, in their canonical order.
fn categories() -> Vec<Category> {
    Category::ALL
        .into_iter()
        .filter(|c| *c != Category::Infra)
        .collect()
}

/// Resolved rate per key over the periods; `pick` chooses the grouping of a period's stats.
fn lines(periods: &[Period], keys: &[Row], pick: fn(&Stats) -> &Vec<Row>) -> Vec<Line> {
    keys.iter()
        .map(|k| Line {
            name: k.key.clone(),
            values: periods
                .iter()
                .map(|p| {
                    pick(&p.stats)
                        .iter()
                        .find(|r| r.key == k.key)
                        .and_then(|r| r.tally.resolved_rate)
                })
                .collect(),
        })
        .collect()
}

fn heat(label: &str, rows: &[CategoryRow]) -> Html {
    let cats = categories();
    let columns: Vec<&str> = cats.iter().map(|c| c.as_str()).collect();
    let rows: Vec<(String, usize, Vec<usize>)> = rows
        .iter()
        .map(|r| {
            (
                r.repository.clone(),
                r.graded,
                cats.iter()
                    .map(|c| r.categories.get(c.as_str()).copied().unwrap_or(0))
                    .collect(),
            )
        })
        .collect();
    heatmap(label, &columns, &rows)
}

fn figure(h: &mut Html, caption: &str, chart: &Html) {
    h.raw("<figure>")
        .el("<figcaption>", caption, "</figcaption>")
        .append(chart)
        .raw("</figure>");
}

fn tally_table(h: &mut Html, title: &str, rows: &[Row]) {
    h.raw("<table class=\"tally\"><tr><th>").text(title).raw(
        "</th><th>graded</th><th>resolved</th><th>rate</th><th>official ok</th>\
              <th>probes rejected</th><th>share</th><th>infra</th></tr>",
    );
    for r in rows {
        let t = &r.tally;
        h.raw("<tr><td>")
            .text(&r.key)
            .raw("</td><td class=\"n\">")
            .show(t.graded)
            .raw("</td><td class=\"n\">")
            .show(t.resolved)
            .raw("</td><td class=\"n\">")
            .text(&pct(t.resolved_rate))
            .raw("</td><td class=\"n\">")
            .show(t.official_passed)
            .raw("</td><td class=\"n\">")
            .show(t.rejected_by_probes)
            .raw("</td><td class=\"n\">")
            .text(&pct(t.rejected_by_probes_share))
            .raw("</td><td class=\"n\">")
            .show(t.infra_errors)
            .raw("</td></tr>");
    }
    h.raw("</table>");
}

pub fn render_dashboard(d: &Dashboard) -> String {
    let mut h = Html::new();
    let o = &d.stats.overall;
    h.raw("<h1>Dashboard</h1><p class=\"note\">")
        .text(&format!(
            "{} finished grades · generated {}",
            o.submissions,
            d.generated_at.format("%Y-%m-%d %H:%M UTC")
        ))
        .raw("</p><p class=\"headline\">")
        .text(&format!(
            "Resolved {} of {} graded ({}). Passed every official test but rejected by \
             probes: {} of {} ({}). Infra errors, not counted: {}.",
            o.resolved,
            o.graded,
            pct(o.resolved_rate),
            o.rejected_by_probes,
            o.official_passed,
            pct(o.rejected_by_probes_share),
            o.infra_errors
        ))
        .raw("</p>");

    let x: Vec<String> = d
        .periods
        .iter()
        .map(|p| p.start.format("%m-%d").to_string())
        .collect();
    h.raw("<h2>Resolved rate over time</h2><div class=\"charts\">");
    figure(
        &mut h,
        "per repository",
        &line_chart(
            "resolved rate per repository over time",
            &x,
            &lines(&d.periods, &d.stats.by_repository, |s| &s.by_repository),
        ),
    );
    figure(
        &mut h,
        "per task",
        &line_chart(
            "resolved rate per task over time",
            &x,
            &lines(&d.periods, &d.stats.by_task, |s| &s.by_task),
        ),
    );
    figure(
        &mut h,
        "per agent account",
        &line_chart(
            "resolved rate per agent account over time",
            &x,
            &lines(&d.periods, &d.stats.by_agent, |s| &s.by_agent),
        ),
    );
    h.raw("</div>");

    h.raw("<h2>Official tests pass, probes reject</h2><div class=\"charts\">");
    let mut bars = vec![Bar {
        name: "all repositories".into(),
        share: o.rejected_by_probes_share.unwrap_or(0.0),
        label: format!(
            "{} of {} ({})",
            o.rejected_by_probes,
            o.official_passed,
            pct(o.rejected_by_probes_share)
        ),
    }];
    for (group, rows) in [("", &d.stats.by_repository), ("agent ", &d.stats.by_agent)] {
        for r in rows {
            bars.push(Bar {
                name: format!("{group}{}", r.key),
                share: r.tally.rejected_by_probes_share.unwrap_or(0.0),
                label: format!(
                    "{} of {} ({})",
                    r.tally.rejected_by_probes,
                    r.tally.official_passed,
                    pct(r.tally.rejected_by_probes_share)
                ),
            });
        }
    }
    figure(
        &mut h,
        "share of official-passing grades rejected by probes",
        &bar_chart("share of official-passing grades rejected by probes", &bars),
    );
    h.raw("</div>");

    h.raw(
        "<h2>Failure categories</h2><p class=\"note\">Graded pull requests with at least one \
           failure of each category (a cell's shade: its share of the row's graded).</p>\
           <div class=\"charts\">",
    );
    figure(
        &mut h,
        "per repository",
        &heat("failure categories per repository", &d.stats.categories),
    );
    figure(
        &mut h,
        "per agent account",
        &heat("failure categories per agent account", &d.agent_categories),
    );
    h.raw("</div>");

    h.raw("<h2>Tables</h2>");
    tally_table(&mut h, "repository", &d.stats.by_repository);
    tally_table(&mut h, "task", &d.stats.by_task);
    tally_table(&mut h, "agent account", &d.stats.by_agent);

    h.raw(
        "<h2>Queue and engines</h2><table class=\"queue\"><tr><th>backend</th><th>queued</th>\
           <th>running</th><th>finished</th><th>cancelled</th></tr>",
    );
    for q in &d.queue {
        h.raw("<tr><td>")
            .text(&q.backend)
            .raw("</td><td class=\"n\">")
            .show(q.queued)
            .raw("</td><td class=\"n\">")
            .show(q.running)
            .raw("</td><td class=\"n\">")
            .show(q.finished)
            .raw("</td><td class=\"n\">")
            .show(q.cancelled)
            .raw("</td></tr>");
    }
    h.raw("</table><p>")
        .text(&format!(
            "GitHub writes waiting in the outbox: {}. Refused webhook deliveries recorded: {}.",
            d.outbox_pending, d.refused_deliveries
        ))
        .raw("</p>");

    h.raw(
        "<h2>Recent grades</h2><table class=\"recent\"><tr><th>grade</th><th>pull request</th>\
           <th>task</th><th>author</th><th>verdict</th><th>finished</th></tr>",
    );
    for g in &d.recent {
        h.raw("<tr><td><a href=\"/grades/")
            .show(g.id)
            .raw("\">")
            .show(g.id)
            .raw("</a></td><td>")
            .text(&format!("{} #{}", g.repo, g.number))
            .raw("</td><td><code>")
            .text(&g.task_id)
            .raw("</code></td><td>")
            .text(&g.author)
            .raw("</td><td>")
            .text(g.verdict.map_or("error (ours)", Verdict::as_str))
            .raw("</td><td>")
            .text(
                &g.finished_at
                    .map_or_else(String::new, |t| t.format("%Y-%m-%d %H:%M").to_string()),
            )
            .raw("</td></tr>");
    }
    h.raw("</table>");
    page("InfraDev dashboard", &h)
}
