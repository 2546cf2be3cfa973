//! The Nexmark queries q0 to q22 as Sluice runs them (`sluice-bench
//! nexmark`, and the oracle tests in `tests/`): Flink's Nexmark SQL
//! (the nexmark repository's `queries/`) in DataFusion's dialect over the
//! tables `person`, `auction` and `bid`, or the feature a query still
//! needs. Where the dialects differ: `DATE_FORMAT` is `to_char`, `HOUR` is
//! `date_part('hour', ..)`, `SPLIT_INDEX` (0-based) is `split_part`
//! (1-based), `REGEXP_EXTRACT` is `regexp_match(..)[i]`, Flink's
//! `count_char` UDF is a `length` difference, and the states of q3 are
//! lower case, as the generator writes them.

/// How a query's output is emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A stateless query, an inner join, or (with watermarks) an
    /// aggregation that emits each window once, final: every row once.
    Append,
    /// An aggregation without a window, or a top-N: each batch emits the
    /// groups (the ranks) it changed.
    Update,
}

/// A query Sluice runs.
#[derive(Debug, Clone, Copy)]
pub struct Runs {
    pub sql: &'static str,
    /// The Nexmark tables it reads.
    pub tables: &'static [&'static str],
    pub mode: Mode,
    /// Watermarks on `date_time` (a join with a time bound).
    pub watermarks: bool,
    /// Joins the static table `side_input` (key, value), 10 000 rows.
    pub side_input: bool,
    /// How this SQL differs from Nexmark's, if it does.
    pub differs: Option<&'static str>,
}

/// One query of the suite.
#[derive(Debug, Clone, Copy)]
pub struct Query {
    pub name: &'static str,
    pub what: &'static str,
    /// The query as run, or the feature it needs.
    pub plan: Result<Runs, &'static str>,
}

const fn runs(sql: &'static str, tables: &'static [&'static str], mode: Mode) -> Runs {
    Runs {
        sql,
        tables,
        mode,
        watermarks: false,
        side_input: false,
        differs: None,
    }
}

const BID: &[&str] = &["bid"];

/// The bids counted by price rank (q15, q16, q17).
macro_rules! rank_counts {
    () => {
        "count(*) FILTER (WHERE price < 10000) AS rank1_bids, \
         count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids, \
         count(*) FILTER (WHERE price >= 1000000) AS rank3_bids"
    };
}

/// The distinct bidders and auctions, in all and by price rank (q15, q16).
macro_rules! distinct_counts {
    () => {
        concat!(
            distinct_by_rank!("bidder", "bidders"),
            ", ",
            distinct_by_rank!("auction", "auctions")
        )
    };
}

macro_rules! distinct_by_rank {
    ($column:literal, $name:literal) => {
        concat!(
            "count(DISTINCT ",
            $column,
            ") AS total_",
            $name,
            ", ",
            "count(DISTINCT ",
            $column,
            ") FILTER (WHERE price < 10000) AS rank1_",
            $name,
            ", ",
            "count(DISTINCT ",
            $column,
            ") FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_",
            $name,
            ", ",
            "count(DISTINCT ",
            $column,
            ") FILTER (WHERE price >= 1000000) AS rank3_",
            $name
        )
    };
}

pub const QUERIES: [Query; 23] = [
    Query {
        name: "q0",
        what: "pass through",
        plan: Ok(runs(
            "SELECT auction, bidder, price, date_time, extra FROM bid",
            BID,
            Mode::Append,
        )),
    },
    Query {
        name: "q1",
        what: "currency conversion",
        plan: Ok(runs(
            "SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid",
            BID,
            Mode::Append,
        )),
    },
    Query {
        name: "q2",
        what: "selection",
        plan: Ok(runs(
            "SELECT auction, price FROM bid WHERE auction % 123 = 0",
            BID,
            Mode::Append,
        )),
    },
    Query {
        name: "q3",
        what: "local item suggestion",
        plan: Ok(runs(
            "SELECT P.name, P.city, P.state, A.id \
             FROM auction AS A INNER JOIN person AS P ON A.seller = P.id \
             WHERE A.category = 10 AND (P.state = 'or' OR P.state = 'id' OR P.state = 'ca')",
            &["auction", "person"],
            Mode::Append,
        )),
    },
    Query {
        name: "q4",
        what: "average price for a category",
        plan: Ok(runs(
            "SELECT Q.category, avg(Q.final) AS avg_final FROM \
             (SELECT max(B.price) AS final, A.category FROM auction A, bid B \
              WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires \
              GROUP BY A.id, A.category) Q \
             GROUP BY Q.category",
            &["auction", "bid"],
            Mode::Update,
        )),
    },
    Query {
        name: "q5",
        what: "hot items",
        plan: Ok(Runs {
            watermarks: true,
            differs: Some(
                "the windows' ends are the join's key, and a BETWEEN on them (implied by the \
                 key) lets the join's state go with the watermark",
            ),
            ..runs(
                "SELECT AuctionBids.auction, AuctionBids.num FROM \
                 (SELECT auction, count(*) AS num, hop(date_time, '10 seconds', '2 seconds')['end'] AS wend \
                  FROM bid GROUP BY auction, hop(date_time, '10 seconds', '2 seconds')) AS AuctionBids \
                 JOIN \
                 (SELECT max(num) AS maxn, w['end'] AS wend FROM \
                  (SELECT count(*) AS num, hop(date_time, '10 seconds', '2 seconds') AS w \
                   FROM bid GROUP BY auction, hop(date_time, '10 seconds', '2 seconds')) AS CountBids \
                  GROUP BY w) AS MaxBids \
                 ON AuctionBids.wend = MaxBids.wend AND AuctionBids.num >= MaxBids.maxn \
                 AND AuctionBids.wend BETWEEN MaxBids.wend AND MaxBids.wend",
                BID,
                Mode::Append,
            )
        }),
    },
    Query {
        name: "q6",
        what: "average selling price by seller",
        plan: Err(
            "OVER windows over rows of an aggregation without a window (Flink runs no q6 either)",
        ),
    },
    Query {
        name: "q7",
        what: "highest bid",
        plan: Ok(Runs {
            watermarks: true,
            differs: Some(
                "B1's time is its window's end (Flink's TUMBLE_ROWTIME: the end less 1 ms)",
            ),
            ..runs(
                "SELECT B.auction, B.price, B.bidder, B.date_time, B.extra FROM bid B \
                 JOIN (SELECT max(price) AS maxprice, window(date_time, '10 seconds')['end'] AS date_time \
                       FROM bid GROUP BY window(date_time, '10 seconds')) B1 \
                 ON B.price = B1.maxprice \
                 WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10 seconds' AND B1.date_time",
                BID,
                Mode::Append,
            )
        }),
    },
    Query {
        name: "q8",
        what: "monitor new users",
        plan: Ok(Runs {
            sql: "SELECT P.id, P.name, P.starttime FROM \
                  (SELECT id, name, date_bin(INTERVAL '10 seconds', date_time) AS starttime, \
                   date_bin(INTERVAL '10 seconds', date_time) + INTERVAL '10 seconds' AS endtime \
                   FROM person GROUP BY id, name, date_bin(INTERVAL '10 seconds', date_time)) P \
                  JOIN \
                  (SELECT seller, date_bin(INTERVAL '10 seconds', date_time) AS starttime, \
                   date_bin(INTERVAL '10 seconds', date_time) + INTERVAL '10 seconds' AS endtime \
                   FROM auction GROUP BY seller, date_bin(INTERVAL '10 seconds', date_time)) A \
                  ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime \
                  AND P.endtime BETWEEN A.endtime AND A.endtime",
            tables: &["person", "auction"],
            mode: Mode::Append,
            watermarks: true,
            side_input: false,
            differs: Some(
                "a BETWEEN on the windows' ends (implied by the key) lets the join's state go \
                 with the watermark",
            ),
        }),
    },
    Query {
        name: "q9",
        what: "winning bids",
        plan: Ok(Runs {
            watermarks: true,
            ..runs(
                "SELECT id, item_name, description, initial_bid, reserve, date_time, expires, seller, \
                 category, extra, auction, bidder, price, bid_date_time, bid_extra FROM \
                 (SELECT A.*, B.auction, B.bidder, B.price, B.date_time AS bid_date_time, B.extra AS bid_extra, \
                  ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.date_time ASC) AS rownum \
                  FROM auction A, bid B \
                  WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires) \
                 WHERE rownum <= 1",
                &["auction", "bid"],
                Mode::Update,
            )
        }),
    },
    Query {
        name: "q10",
        what: "log to file system",
        plan: Ok(Runs {
            differs: Some(
                "into the discard sink, as every query here; Nexmark writes files partitioned by dt and hm",
            ),
            ..runs(
                "SELECT auction, bidder, price, date_time, extra, \
                 to_char(date_time, '%Y-%m-%d') AS dt, to_char(date_time, '%H:%M') AS hm FROM bid",
                BID,
                Mode::Append,
            )
        }),
    },
    Query {
        name: "q11",
        what: "user sessions",
        plan: Ok(Runs {
            watermarks: true,
            ..runs(
                "SELECT bidder, count(*) AS bid_count, \
                 session_window(date_time, '10 seconds')['start'] AS starttime, \
                 session_window(date_time, '10 seconds')['end'] AS endtime \
                 FROM bid GROUP BY bidder, session_window(date_time, '10 seconds')",
                BID,
                Mode::Append,
            )
        }),
    },
    Query {
        name: "q12",
        what: "processing-time windows",
        plan: Err("processing-time windows (PROCTIME())"),
    },
    Query {
        name: "q13",
        what: "bounded side input join",
        plan: Ok(Runs {
            side_input: true,
            ..runs(
                "SELECT B.auction, B.bidder, B.price, B.date_time, S.value \
                 FROM bid B JOIN side_input S ON B.auction % 10000 = S.key",
                BID,
                Mode::Append,
            )
        }),
    },
    Query {
        name: "q14",
        what: "calculation",
        plan: Ok(runs(
            "SELECT auction, bidder, 0.908 * price AS price, \
             CASE WHEN date_part('hour', date_time) >= 8 AND date_part('hour', date_time) <= 18 THEN 'dayTime' \
             WHEN date_part('hour', date_time) <= 6 OR date_part('hour', date_time) >= 20 THEN 'nightTime' \
             ELSE 'otherTime' END AS bid_time_type, \
             date_time, extra, length(extra) - length(replace(extra, 'c', '')) AS c_counts \
             FROM bid WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000",
            BID,
            Mode::Append,
        )),
    },
    Query {
        name: "q15",
        what: "bidding statistics report",
        plan: Ok(runs(
            concat!(
                "SELECT to_char(date_time, '%Y-%m-%d') AS day, count(*) AS total_bids, ",
                rank_counts!(),
                ", ",
                distinct_counts!(),
                " FROM bid GROUP BY to_char(date_time, '%Y-%m-%d')"
            ),
            BID,
            Mode::Update,
        )),
    },
    Query {
        name: "q16",
        what: "channel statistics report",
        plan: Ok(runs(
            concat!(
                "SELECT channel, to_char(date_time, '%Y-%m-%d') AS day, \
                 max(to_char(date_time, '%H:%M')) AS minute, count(*) AS total_bids, ",
                rank_counts!(),
                ", ",
                distinct_counts!(),
                " FROM bid GROUP BY channel, to_char(date_time, '%Y-%m-%d')"
            ),
            BID,
            Mode::Update,
        )),
    },
    Query {
        name: "q17",
        what: "auction statistics report",
        plan: Ok(runs(
            concat!(
                "SELECT auction, to_char(date_time, '%Y-%m-%d') AS day, count(*) AS total_bids, ",
                rank_counts!(),
                ", min(price) AS min_price, max(price) AS max_price, avg(price) AS avg_price, \
                 sum(price) AS sum_price \
                 FROM bid GROUP BY auction, to_char(date_time, '%Y-%m-%d')"
            ),
            BID,
            Mode::Update,
        )),
    },
    Query {
        name: "q18",
        what: "find last bid",
        plan: Ok(runs(
            "SELECT auction, bidder, price, channel, url, date_time, extra FROM \
             (SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY date_time DESC) AS rank_number \
             FROM bid) WHERE rank_number <= 1",
            BID,
            Mode::Update,
        )),
    },
    Query {
        name: "q19",
        what: "auction top-10 price",
        plan: Ok(runs(
            "SELECT * FROM \
             (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number \
             FROM bid) WHERE rank_number <= 10",
            BID,
            Mode::Update,
        )),
    },
    Query {
        name: "q20",
        what: "expand bid with auction",
        plan: Ok(runs(
            "SELECT B.auction, B.bidder, B.price, B.channel, B.url, B.date_time AS b_date_time, \
             B.extra AS b_extra, A.item_name, A.description, A.initial_bid, A.reserve, \
             A.date_time AS a_date_time, A.expires, A.seller, A.category, A.extra AS a_extra \
             FROM bid AS B INNER JOIN auction AS A ON B.auction = A.id WHERE A.category = 10",
            &["bid", "auction"],
            Mode::Append,
        )),
    },
    Query {
        name: "q21",
        what: "add channel id",
        plan: Ok(runs(
            "SELECT auction, bidder, price, channel, \
             CASE WHEN lower(channel) = 'apple' THEN '0' WHEN lower(channel) = 'google' THEN '1' \
             WHEN lower(channel) = 'facebook' THEN '2' WHEN lower(channel) = 'baidu' THEN '3' \
             ELSE regexp_match(url, '(&|^)channel_id=([^&]*)')[2] END AS channel_id \
             FROM bid WHERE regexp_match(url, '(&|^)channel_id=([^&]*)')[2] IS NOT NULL \
             OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')",
            BID,
            Mode::Append,
        )),
    },
    Query {
        name: "q22",
        what: "get URL directories",
        plan: Ok(runs(
            "SELECT auction, bidder, price, channel, split_part(url, '/', 4) AS dir1, \
             split_part(url, '/', 5) AS dir2, split_part(url, '/', 6) AS dir3 FROM bid",
            BID,
            Mode::Append,
        )),
    },
];

/// The query named `name` (`q0` .. `q22`).
pub fn find(name: &str) -> Option<&'static Query> {
    QUERIES.iter().find(|q| q.name == name)
}
