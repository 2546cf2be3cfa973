//! The `nexmark` source's settings: which table of the Nexmark auction
//! stream, how fast, how many events, and the generator's settings, each
//! optional with Nexmark's default. The rows themselves are
//! `crate::nexmark`'s.

use serde::{Deserialize, Serialize};
use sluice_proto as pb;

use super::{MAX_PARTITIONS, MAX_ROWS_PER_SECOND};
use crate::error::{Error, Result};

/// The event time of event 0 when `base_time_ms` is left out:
/// 2025-01-01T00:00:00Z. Fixed, so that the same settings give the same
/// rows on every machine and at every start.
pub const DEFAULT_BASE_TIME_MS: u64 = 1_735_689_600_000;

/// The latest `base_time_ms`: 2200-01-01T00:00:00Z. Some of DataFusion's
/// time functions (`date_bin`, casts between time units) work in
/// nanoseconds in an `i64`, which end at 2262-04-11 (past it `date_bin`
/// gives null), and `to_char` fails where chrono's dates end; the cap
/// leaves 62 years of event time after the base (event time advances at
/// the pace the events are read, so a query never reaches the end).
pub const MAX_BASE_TIME_MS: u64 = 7_258_118_400_000;

/// The largest `avg_*_byte_size`: 1 MiB.
pub const MAX_AVG_BYTE_SIZE: u64 = 1 << 20;

/// The tables of the Nexmark stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NexmarkTable {
    Person,
    Auction,
    Bid,
}

impl NexmarkTable {
    pub const ALL: [NexmarkTable; 3] = [
        NexmarkTable::Person,
        NexmarkTable::Auction,
        NexmarkTable::Bid,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NexmarkTable::Person => "person",
            NexmarkTable::Auction => "auction",
            NexmarkTable::Bid => "bid",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

/// `source: {nexmark: {...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NexmarkSpec {
    pub table: NexmarkTable,
    /// Events of all kinds per second: the pace of the source and of its
    /// event time.
    pub events_per_second: u64,
    /// Events of all kinds; the table holds its share. Absent: unbounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_events: Option<u64>,
    pub partitions: u32,
    // The generator's settings (Nexmark's names); each absent one takes
    // Nexmark's default.
    /// The event time of event 0, in milliseconds since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_time_ms: Option<u64>,
    /// People considered active for placing auctions or bids (1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_people: Option<u64>,
    /// Auctions in flight at any time (100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight_auctions: Option<u64>,
    /// Of every `person + auction + bid` events, how many of each (1, 3, 46).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub person_proportion: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auction_proportion: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bid_proportion: Option<u64>,
    /// Average sizes of the events, in bytes, which `extra` pads to (200,
    /// 500, 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub avg_person_byte_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub avg_auction_byte_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub avg_bid_byte_size: Option<u64>,
    /// One in this many auctions are by a hot seller... (4, 2, 4, 2:
    /// sellers, auctions, bidders, channels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hot_seller_ratio: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hot_auction_ratio: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hot_bidder_ratio: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hot_channel_ratio: Option<u64>,
}

/// The generator's settings, each field named as the spec names it.
fn optional_fields(g: &NexmarkSpec) -> [(&'static str, Option<u64>); 12] {
    [
        ("active_people", g.active_people),
        ("in_flight_auctions", g.in_flight_auctions),
        ("person_proportion", g.person_proportion),
        ("auction_proportion", g.auction_proportion),
        ("bid_proportion", g.bid_proportion),
        ("avg_person_byte_size", g.avg_person_byte_size),
        ("avg_auction_byte_size", g.avg_auction_byte_size),
        ("avg_bid_byte_size", g.avg_bid_byte_size),
        ("hot_seller_ratio", g.hot_seller_ratio),
        ("hot_auction_ratio", g.hot_auction_ratio),
        ("hot_bidder_ratio", g.hot_bidder_ratio),
        ("hot_channel_ratio", g.hot_channel_ratio),
    ]
}

impl NexmarkSpec {
    /// Checks every range, naming the field under `field` (`source.nexmark`).
    pub fn validate(&self, field: &str) -> Result<()> {
        if self.partitions == 0 || self.partitions > MAX_PARTITIONS {
            return Err(Error::invalid(
                format!("{field}.partitions"),
                format!("must be in 1..={MAX_PARTITIONS}, got {}", self.partitions),
            ));
        }
        if self.events_per_second == 0 || self.events_per_second > MAX_ROWS_PER_SECOND {
            return Err(Error::invalid(
                format!("{field}.events_per_second"),
                format!(
                    "must be in 1..={MAX_ROWS_PER_SECOND}, got {}",
                    self.events_per_second
                ),
            ));
        }
        if self.total_events == Some(0) {
            return Err(Error::invalid(
                format!("{field}.total_events"),
                "must be at least 1",
            ));
        }
        for (name, value) in optional_fields(self) {
            let Some(v) = value else { continue };
            let max = if name.starts_with("avg_") {
                MAX_AVG_BYTE_SIZE
            } else {
                u64::from(u32::MAX)
            };
            if v == 0 || v > max {
                return Err(Error::invalid(
                    format!("{field}.{name}"),
                    format!("must be in 1..={max}, got {v}"),
                ));
            }
        }
        if let Some(t) = self.base_time_ms
            && t > MAX_BASE_TIME_MS
        {
            return Err(Error::invalid(
                format!("{field}.base_time_ms"),
                format!(
                    "must be at most {MAX_BASE_TIME_MS} (2200-01-01T00:00:00Z): SQL's time \
                     functions that count in nanoseconds (date_bin) end in 2262, and to_char \
                     fails far past it; got {t}"
                ),
            ));
        }
        Ok(())
    }

    pub fn base_time_ms(&self) -> u64 {
        self.base_time_ms.unwrap_or(DEFAULT_BASE_TIME_MS)
    }
}

impl From<&NexmarkSpec> for pb::NexmarkSource {
    fn from(s: &NexmarkSpec) -> Self {
        let g = s;
        pb::NexmarkSource {
            table: s.table.as_str().to_string(),
            events_per_second: s.events_per_second,
            total_events: s.total_events,
            partitions: s.partitions,
            base_time_ms: g.base_time_ms,
            active_people: g.active_people,
            in_flight_auctions: g.in_flight_auctions,
            person_proportion: g.person_proportion,
            auction_proportion: g.auction_proportion,
            bid_proportion: g.bid_proportion,
            avg_person_byte_size: g.avg_person_byte_size,
            avg_auction_byte_size: g.avg_auction_byte_size,
            avg_bid_byte_size: g.avg_bid_byte_size,
            hot_seller_ratio: g.hot_seller_ratio,
            hot_auction_ratio: g.hot_auction_ratio,
            hot_bidder_ratio: g.hot_bidder_ratio,
            hot_channel_ratio: g.hot_channel_ratio,
        }
    }
}

impl TryFrom<&pb::NexmarkSource> for NexmarkSpec {
    type Error = Error;

    /// The settings as a spec, validated: a task's settings are checked
    /// as a submitted spec's are.
    fn try_from(p: &pb::NexmarkSource) -> Result<Self> {
        let table = NexmarkTable::parse(&p.table).ok_or_else(|| {
            Error::invalid(
                "source.nexmark.table",
                format!(
                    "unknown table {:?}; expected person, auction or bid",
                    p.table
                ),
            )
        })?;
        let spec = NexmarkSpec {
            table,
            events_per_second: p.events_per_second,
            total_events: p.total_events,
            partitions: p.partitions,
            base_time_ms: p.base_time_ms,
            active_people: p.active_people,
            in_flight_auctions: p.in_flight_auctions,
            person_proportion: p.person_proportion,
            auction_proportion: p.auction_proportion,
            bid_proportion: p.bid_proportion,
            avg_person_byte_size: p.avg_person_byte_size,
            avg_auction_byte_size: p.avg_auction_byte_size,
            avg_bid_byte_size: p.avg_bid_byte_size,
            hot_seller_ratio: p.hot_seller_ratio,
            hot_auction_ratio: p.hot_auction_ratio,
            hot_bidder_ratio: p.hot_bidder_ratio,
            hot_channel_ratio: p.hot_channel_ratio,
        };
        spec.validate("source.nexmark")?;
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use crate::error::Error;
    use crate::spec::{QuerySpec, SourceSpec};

    fn parse(source: &str) -> crate::Result<QuerySpec> {
        QuerySpec::parse(&format!(
            "name: q\nsource: {source}\nsink: {{files: {{path: /tmp/out}}}}\n"
        ))
    }

    fn field(source: &str) -> String {
        match parse(source).expect_err("refused") {
            Error::InvalidSpec { field, .. } => field,
            e => panic!("not a spec error: {e}"),
        }
    }

    #[test]
    fn settings_parse_with_defaults_and_round_trip_through_the_proto() {
        let spec = parse("{nexmark: {table: bid, events_per_second: 1000000, total_events: 10000000, partitions: 4, active_people: 500}}").unwrap();
        let Some(SourceSpec::Nexmark(n)) = &spec.source else {
            panic!("not nexmark: {spec:?}");
        };
        assert_eq!(n.table, super::NexmarkTable::Bid);
        assert_eq!(n.active_people, Some(500));
        assert_eq!(n.base_time_ms(), super::DEFAULT_BASE_TIME_MS);
        let back = super::NexmarkSpec::try_from(&sluice_proto::NexmarkSource::from(n)).unwrap();
        assert_eq!(&back, n);
    }

    #[test]
    fn bad_settings_are_refused_by_name() {
        assert_eq!(
            field("{nexmark: {table: bids, events_per_second: 1, partitions: 1}}"),
            "source.nexmark.table"
        );
        assert_eq!(
            field("{nexmark: {table: bid, events_per_second: 0, partitions: 1}}"),
            "source.nexmark.events_per_second"
        );
        assert_eq!(
            field("{nexmark: {table: bid, events_per_second: 1, partitions: 0}}"),
            "source.nexmark.partitions"
        );
        assert_eq!(
            field(
                "{nexmark: {table: bid, events_per_second: 1, partitions: 1, bid_proportion: 0}}"
            ),
            "source.nexmark.bid_proportion"
        );
        assert_eq!(
            field("{nexmark: {table: bid, events_per_second: 1, partitions: 1, seed: 3}}"),
            "source.nexmark.seed"
        );
    }

    #[test]
    fn base_time_ms_ends_where_sql_time_functions_do() {
        let with = |t: u64| {
            format!(
                "{{nexmark: {{table: bid, events_per_second: 1, partitions: 1, base_time_ms: {t}}}}}"
            )
        };
        parse(&with(super::MAX_BASE_TIME_MS)).unwrap();
        let e = parse(&with(super::MAX_BASE_TIME_MS + 1)).unwrap_err();
        let Error::InvalidSpec { field: at, reason } = &e else {
            panic!("not a spec error: {e}");
        };
        assert_eq!(at, "source.nexmark.base_time_ms");
        assert!(
            reason.contains("must be at most 7258118400000 (2200-01-01T00:00:00Z)"),
            "{reason}"
        );
        // In 2264, where to_char and date_bin fail at batch 0.
        assert_eq!(
            field(&with(9_300_000_000_000)),
            "source.nexmark.base_time_ms"
        );
    }
}
