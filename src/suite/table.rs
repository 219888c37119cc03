//! The README's task table: every task with its repository, area, ranks, probe categories and
//! kill rate, rendered from the manifests and the power records (`infradev tasks table`;
//! tests/manifests.rs checks the README carries exactly this). Pure.

use std::fmt::Write as _;

use crate::grading::Category;
use crate::suite::power::{Assessment, percent};
use crate::task::Task;

/// What the table says of one task.
pub struct Row<'a> {
    pub task: &'a Task,
    pub power: &'a Assessment,
}

/// The Markdown table, one row per task in the order given.
pub fn render(rows: &[Row<'_>]) -> String {
    let mut out = String::from(
        "| task | repository | area | ranks | probe categories | kill rate | what it asks |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for row in rows {
        let t = row.task;
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} | {} | {} |",
            t.id,
            upstream(t),
            t.area,
            t.ranks,
            categories(t).join(", "),
            kill_rate(row.power),
            cell(&t.summary)
        );
    }
    out
}

/// The repository and PR, and how many later upstream fixes the graded reference carries.
fn upstream(task: &Task) -> String {
    let fixes = task.upstream.follow_up.len() + task.upstream.follow_up_releases.len();
    match fixes {
        0 => format!("{} #{}", task.repository, task.pr),
        1 => format!("{} #{} (+ 1 upstream fix)", task.repository, task.pr),
        n => format!("{} #{} (+ {n} upstream fixes)", task.repository, task.pr),
    }
}

/// The probes' categories, each once, in the order of `Category::ALL`.
pub fn categories(task: &Task) -> Vec<&'static str> {
    Category::ALL
        .into_iter()
        .filter(|c| task.probes.probes.iter().any(|p| p.category == *c))
        .map(Category::as_str)
        .collect()
}

fn kill_rate(power: &Assessment) -> String {
    match power {
        Assessment::NotMeasured => "not measured yet".into(),
        Assessment::Holds {
            kill_rate: Some(rate),
            counts,
        } => {
            let mut s = format!(
                "{} ({} of {}",
                percent(*rate),
                counts.killed,
                counts.killed + counts.survived
            );
            if counts.variants > 0 {
                let _ = write!(s, "; {} variants accepted", counts.variants_accepted);
            }
            s + ")"
        }
        Assessment::Holds {
            kill_rate: None, ..
        } => "n/a".into(),
        Assessment::Fails(_) => "stale or under the bar (`tasks check` says why)".into(),
    }
}

/// Text safe inside a table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::power::Counts;

    #[test]
    fn the_kill_rate_cell_says_what_the_record_says() {
        let counts = Counts {
            killed: 9,
            survived: 1,
            variants: 4,
            variants_accepted: 4,
            ..Counts::default()
        };
        let cases = [
            (Assessment::NotMeasured, "not measured yet"),
            (
                Assessment::Holds {
                    kill_rate: Some(0.9),
                    counts: counts.clone(),
                },
                "90.0 % (9 of 10; 4 variants accepted)",
            ),
            (
                Assessment::Holds {
                    kill_rate: None,
                    counts,
                },
                "n/a",
            ),
            (
                Assessment::Fails(vec!["stale".into()]),
                "stale or under the bar (`tasks check` says why)",
            ),
        ];
        for (power, want) in cases {
            assert_eq!(kill_rate(&power), want);
        }
    }

    #[test]
    fn a_cell_never_breaks_the_table() {
        assert_eq!(cell("a | b\nc"), "a \\| b c");
    }
}
