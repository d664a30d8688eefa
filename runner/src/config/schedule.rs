//! `[[schedule]]`: jobs enqueued on a cron expression (in an IANA time zone,
//! DST-correct through jiff) or every fixed period, and what to do about
//! fire times missed while no runner ran.

use std::ops::Range;
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::units::parse_duration;

/// At most this many missed fire times are enqueued with `missed = "all"`.
pub const MAX_CATCH_UP: usize = 100;

/// One `[[schedule]]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleConfig {
    /// Its name: part of every job id it makes (`name@<fire time ms>`).
    pub name: String,
    /// The topic its jobs go to.
    pub topic: String,
    /// When it fires.
    pub when: When,
    /// The payload of every job.
    pub payload: Vec<u8>,
    /// Fire times missed while no runner ran.
    pub missed: Missed,
}

/// When a schedule fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum When {
    /// A cron expression (5 fields, or 6 with seconds first) in a time zone.
    Cron {
        /// The expression as jiff-cron reads it (seconds first).
        expr: String,
        /// The IANA time zone name.
        timezone: String,
    },
    /// Every period, at multiples of it since the Unix epoch.
    Every(Duration),
}

/// What to do with fire times that passed while no runner ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Missed {
    /// Forget them.
    Skip,
    /// Enqueue the most recent one, now.
    Latest,
    /// Enqueue each (at most [`MAX_CATCH_UP`]), now.
    All,
}

impl ScheduleConfig {
    /// Fire times after `after_ms` up to and including `until_ms`, at most `max`.
    pub fn ticks(&self, after_ms: u64, until_ms: u64, max: usize) -> Vec<u64> {
        match &self.when {
            When::Every(period) => {
                let p = period.as_millis().max(1) as u64;
                let first = (after_ms / p + 1) * p;
                (0..)
                    .map(|k| first + k * p)
                    .take_while(|t| *t <= until_ms)
                    .take(max)
                    .collect()
            }
            When::Cron { expr, timezone } => {
                let (Ok(schedule), Ok(tz)) = (
                    jiff_cron::Schedule::from_str(expr),
                    jiff::tz::TimeZone::get(timezone),
                ) else {
                    return Vec::new(); // validated at load: cannot happen
                };
                let Ok(after) = jiff::Timestamp::from_millisecond(after_ms as i64) else {
                    return Vec::new();
                };
                schedule
                    .after(after.to_zoned(tz))
                    .map(|z| z.timestamp().as_millisecond().max(0) as u64)
                    .take_while(|t| *t <= until_ms)
                    .take(max)
                    .collect()
            }
        }
    }

    /// The last fire time at or before `until_ms`, if one is within a year
    /// before it: windows widening back from `until_ms` (a minute, an hour,
    /// a day, a month, a year), the first that holds a fire time giving it.
    pub fn last_tick(&self, until_ms: u64) -> Option<u64> {
        const WINDOWS: [u64; 5] = [
            60_000,
            3_600_000,
            86_400_000,
            31 * 86_400_000,
            366 * 86_400_000,
        ];
        WINDOWS.iter().find_map(|w| {
            let after = until_ms.saturating_sub(*w + 1);
            self.ticks(after, until_ms, usize::MAX).last().copied()
        })
    }

    /// What to enqueue of `ticks` at `now_ms`: (fire time, due time) pairs.
    /// Fire times still ahead are due then; those already past are missed,
    /// and `missed` says which of them run, due now.
    pub fn plan(&self, ticks: &[u64], now_ms: u64) -> Vec<(u64, u64)> {
        let past = ticks.partition_point(|t| *t < now_ms);
        let (missed, ahead) = ticks.split_at(past);
        let caught: &[u64] = match self.missed {
            Missed::Skip => &[],
            Missed::Latest => &missed[missed.len().saturating_sub(1)..],
            Missed::All => &missed[missed.len().saturating_sub(MAX_CATCH_UP)..],
        };
        caught
            .iter()
            .map(|t| (*t, now_ms))
            .chain(ahead.iter().map(|t| (*t, *t)))
            .collect()
    }

    /// The job id of the fire time `tick`.
    pub fn job_id(&self, tick: u64) -> String {
        format!("{}@{tick}", self.name)
    }
}

/// `[[schedule]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSchedule {
    pub name: Spanned<String>,
    pub topic: Spanned<String>,
    pub cron: Option<Spanned<String>>,
    pub every: Option<Spanned<String>>,
    pub timezone: Option<Spanned<String>>,
    #[serde(default)]
    pub payload: String,
    pub missed: Option<Missed>,
}

type Invalid = (Range<usize>, String);

impl RawSchedule {
    /// Validate one schedule; errors name the field.
    pub fn resolve(self) -> Result<ScheduleConfig, Invalid> {
        let name_span = self.name.span();
        let name = self.name.into_inner();
        if name.is_empty()
            || name.len() > 100
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            return Err((
                name_span,
                format!("field `name`: {name:?}: 1 to 100 letters, digits, '_', '-' or '.'"),
            ));
        }
        let when = match (self.cron, self.every) {
            (Some(cron), None) => {
                let span = cron.span();
                let text = cron.into_inner();
                let fields = text.split_whitespace().count();
                let expr = match fields {
                    5 => format!("0 {text}"),
                    6 | 7 => text.clone(),
                    n => {
                        return Err((
                            span,
                            format!(
                                "field `cron`: {text:?} has {n} fields; write 5 (minute hour day month weekday, e.g. \"0 3 * * *\") or 6 with seconds first"
                            ),
                        ));
                    }
                };
                jiff_cron::Schedule::from_str(&expr).map_err(|e| {
                    (
                        span,
                        format!("field `cron`: {text:?} is not a cron expression: {e}"),
                    )
                })?;
                let timezone = match self.timezone {
                    None => "UTC".to_owned(),
                    Some(tz) => {
                        let span = tz.span();
                        let tz = tz.into_inner();
                        jiff::tz::TimeZone::get(&tz).map_err(|_| {
                            (
                                span,
                                format!(
                                    "field `timezone`: {tz:?} is not an IANA time zone (e.g. \"Europe/Berlin\", \"UTC\")"
                                ),
                            )
                        })?;
                        tz
                    }
                };
                When::Cron { expr, timezone }
            }
            (None, Some(every)) => {
                let span = every.span();
                if let Some(tz) = self.timezone {
                    return Err((
                        tz.span(),
                        "field `timezone`: only for `cron`; `every` counts from the Unix epoch"
                            .into(),
                    ));
                }
                let period = parse_duration(every.get_ref())
                    .map_err(|e| (span.clone(), format!("field `every`: {e}")))?;
                if period < Duration::from_secs(1) {
                    return Err((span, "field `every`: at least 1s".into()));
                }
                When::Every(period)
            }
            _ => {
                return Err((
                    name_span,
                    format!("schedule {name:?}: give exactly one of `cron` and `every`"),
                ));
            }
        };
        Ok(ScheduleConfig {
            name,
            topic: self.topic.into_inner(),
            when,
            payload: self.payload.into_bytes(),
            missed: self.missed.unwrap_or(Missed::Latest),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cron(expr: &str, tz: &str) -> ScheduleConfig {
        ScheduleConfig {
            name: "s".into(),
            topic: "t".into(),
            when: When::Cron {
                expr: format!("0 {expr}"),
                timezone: tz.into(),
            },
            payload: vec![],
            missed: Missed::Latest,
        }
    }

    fn ms(text: &str) -> u64 {
        text.parse::<jiff::Timestamp>().unwrap().as_millisecond() as u64
    }

    #[test]
    fn three_in_the_morning_in_berlin_across_both_dst_changes() {
        let s = cron("0 3 * * *", "Europe/Berlin");
        // spring forward on 2026-03-29 (02:00 -> 03:00), fall back on 2026-10-25
        let spring = s.ticks(ms("2026-03-27T12:00:00Z"), ms("2026-03-31T00:00:00Z"), 10);
        assert_eq!(
            spring,
            [
                ms("2026-03-28T02:00:00Z"), // CET, UTC+1
                ms("2026-03-29T01:00:00Z"), // CEST from this morning, UTC+2
                ms("2026-03-30T01:00:00Z"),
            ]
        );
        let autumn = s.ticks(ms("2026-10-24T12:00:00Z"), ms("2026-10-27T00:00:00Z"), 10);
        assert_eq!(
            autumn,
            [
                ms("2026-10-25T02:00:00Z"), // CET again from 03:00 CEST that morning
                ms("2026-10-26T02:00:00Z"),
            ]
        );
    }

    #[test]
    fn a_time_skipped_in_spring_fires_once_just_after_the_gap() {
        // 02:30 does not exist in Berlin on 2026-03-29: it fires at 03:30 CEST
        // (the same time after the clocks moved), once
        let s = cron("30 2 * * *", "Europe/Berlin");
        let ticks = s.ticks(ms("2026-03-28T00:00:00Z"), ms("2026-03-31T00:00:00Z"), 10);
        assert_eq!(
            ticks,
            [
                ms("2026-03-28T01:30:00Z"),
                ms("2026-03-29T01:30:00Z"),
                ms("2026-03-30T00:30:00Z")
            ],
            "{ticks:?}"
        );
    }

    #[test]
    fn a_time_that_occurs_twice_in_autumn_fires_once() {
        // 02:30 happens twice in Berlin on 2026-10-25
        let s = cron("30 2 * * *", "Europe/Berlin");
        let ticks = s.ticks(ms("2026-10-24T12:00:00Z"), ms("2026-10-26T00:00:00Z"), 10);
        assert_eq!(ticks.len(), 1, "{ticks:?}");
    }

    #[test]
    fn every_counts_from_the_epoch_and_missed_ticks_follow_the_policy() {
        let mut s = ScheduleConfig {
            when: When::Every(Duration::from_secs(1)),
            ..cron("* * * * *", "UTC")
        };
        let ticks = s.ticks(10_500, 17_000, 100);
        assert_eq!(
            ticks,
            [11_000, 12_000, 13_000, 14_000, 15_000, 16_000, 17_000]
        );
        // at 15.5 s: 11..15 are missed, 16 and 17 are ahead
        s.missed = Missed::Skip;
        assert_eq!(s.plan(&ticks, 15_500), [(16_000, 16_000), (17_000, 17_000)]);
        s.missed = Missed::Latest;
        assert_eq!(
            s.plan(&ticks, 15_500),
            [(15_000, 15_500), (16_000, 16_000), (17_000, 17_000)]
        );
        s.missed = Missed::All;
        assert_eq!(s.plan(&ticks, 15_500).len(), 7);
        assert_eq!(s.job_id(15_000), "s@15000");
    }

    #[test]
    fn the_last_fire_time_looks_back_as_far_as_it_must() {
        let every = ScheduleConfig {
            when: When::Every(Duration::from_secs(10)),
            ..cron("* * * * *", "UTC")
        };
        assert_eq!(every.last_tick(125_000), Some(120_000));
        assert_eq!(
            every.last_tick(120_000),
            Some(120_000),
            "at the time itself"
        );
        // monthly at 06:00 on the 1st, in New York
        let monthly = cron("0 6 1 * *", "America/New_York");
        assert_eq!(
            monthly.last_tick(ms("2026-12-02T16:00:00Z")),
            Some(ms("2026-12-01T11:00:00Z"))
        );
        // yearly, once on 1 January: found within a year
        let yearly = cron("0 0 1 1 *", "UTC");
        assert_eq!(
            yearly.last_tick(ms("2026-12-02T16:00:00Z")),
            Some(ms("2026-01-01T00:00:00Z"))
        );
        // none within a year before: none
        let leap = cron("0 0 29 2 *", "UTC");
        assert_eq!(leap.last_tick(ms("2027-06-01T00:00:00Z")), None);
    }
}
