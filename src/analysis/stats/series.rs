//! The tables over time: samples bucketed by the day their grade finished, each bucket
//! aggregated by [`aggregate`](super::aggregate) (one implementation). Pure.

use std::collections::BTreeMap;

use chrono::NaiveDate;

use super::{Sample, Stats, aggregate};

/// The tables of one period of `days` days starting at `start`.
#[derive(Debug, Clone, PartialEq)]
pub struct Period {
    pub start: NaiveDate,
    pub days: u32,
    pub stats: Stats,
}

/// Buckets `samples` (each with the day it finished) into periods of `days` days (at least
/// one), counted from the earliest sample's day, and aggregates each. Periods without
/// samples are left out; periods come oldest first.
pub fn series(samples: &[(NaiveDate, Sample)], days: u32) -> Vec<Period> {
    let days = days.max(1);
    let Some(first) = samples.iter().map(|(d, _)| *d).min() else {
        return Vec::new();
    };
    let mut buckets: BTreeMap<i64, Vec<Sample>> = BTreeMap::new();
    for (day, sample) in samples {
        let index = (*day - first).num_days().div_euclid(i64::from(days));
        buckets.entry(index).or_default().push(sample.clone());
    }
    buckets
        .into_iter()
        .map(|(index, samples)| Period {
            start: first + chrono::Duration::days(index * i64::from(days)),
            days,
            stats: aggregate(&samples),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::stats::{Labels, SampleOutcome};

    fn sample(agent: &str, outcome: SampleOutcome) -> Sample {
        Sample {
            task: "t".into(),
            repository: "o/r".into(),
            labels: Labels {
                agent: agent.into(),
                model: None,
                account: None,
            },
            outcome,
            official_passed: outcome == SampleOutcome::Resolved,
            rejected_by_probes: false,
            flaky: false,
            categories: Default::default(),
        }
    }

    #[test]
    fn samples_fall_into_periods_counted_from_the_first_day() {
        let d = |day| NaiveDate::from_ymd_opt(2026, 11, day).unwrap();
        let samples = vec![
            (d(3), sample("a", SampleOutcome::Resolved)),
            (d(1), sample("a", SampleOutcome::Unresolved)),
            (d(2), sample("b", SampleOutcome::Resolved)),
            (d(9), sample("b", SampleOutcome::Infra)),
        ];
        let weekly = series(&samples, 7);
        assert_eq!(weekly.len(), 2);
        assert_eq!(weekly[0].start, d(1));
        assert_eq!(weekly[0].stats.overall.graded, 3);
        assert_eq!(weekly[0].stats.overall.resolved, 2);
        assert_eq!(weekly[1].start, d(8));
        assert_eq!(weekly[1].stats.overall.graded, 0);
        assert_eq!(weekly[1].stats.overall.infra_errors, 1);
        let daily = series(&samples, 0);
        assert_eq!(
            daily.iter().map(|p| p.start).collect::<Vec<_>>(),
            [d(1), d(2), d(3), d(9)],
            "empty days are left out; 0 days means 1"
        );
        assert!(series(&[], 7).is_empty());
    }
}
