use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, TimestampMillisecondType};
use arrow_select::concat::concat_batches;

use super::*;
use crate::spec::DEFAULT_BASE_TIME_MS;

fn spec(table: NexmarkTable, partitions: u32) -> NexmarkSpec {
    NexmarkSpec {
        table,
        events_per_second: 1_000_000,
        total_events: None,
        partitions,
        base_time_ms: None,
        active_people: None,
        in_flight_auctions: None,
        person_proportion: None,
        auction_proportion: None,
        bid_proportion: None,
        avg_person_byte_size: None,
        avg_auction_byte_size: None,
        avg_bid_byte_size: None,
        hot_seller_ratio: None,
        hot_auction_ratio: None,
        hot_bidder_ratio: None,
        hot_channel_ratio: None,
    }
}

fn all(spec: &NexmarkSpec, start: u64, end: u64) -> RecordBatch {
    let batches = generate(spec, start, end).unwrap();
    concat_batches(&schema(spec.table), &batches).unwrap()
}

fn ints(b: &RecordBatch, col: &str) -> Vec<i64> {
    b.column_by_name(col)
        .unwrap()
        .as_primitive::<Int64Type>()
        .values()
        .to_vec()
}

#[test]
fn every_event_belongs_to_one_table() {
    for n in [0u64, 1, 3, 4, 49, 50, 51, 1234, 1_000_000] {
        let sum: u64 = NexmarkTable::ALL
            .iter()
            .map(|&t| rows_below(&spec(t, 1), n))
            .sum();
        assert_eq!(sum, n, "events {n}");
    }
    // Nexmark's default proportions: 1 person, 3 auctions, 46 bids in 50.
    assert_eq!(rows_below(&spec(NexmarkTable::Person, 1), 100), 2);
    assert_eq!(rows_below(&spec(NexmarkTable::Auction, 1), 100), 6);
    assert_eq!(rows_below(&spec(NexmarkTable::Bid, 1), 100), 92);
    assert_eq!(rows_below(&spec(NexmarkTable::Auction, 1), 2), 1);
    assert_eq!(events_for_rows(&spec(NexmarkTable::Bid, 1), 92), 100);
    assert_eq!(events_for_rows(&spec(NexmarkTable::Person, 1), 3), 150);
    assert_eq!(events_for_rows(&spec(NexmarkTable::Person, 1), 0), 1);
}

#[test]
fn rows_are_a_function_of_their_index_and_the_settings() {
    let s = spec(NexmarkTable::Bid, 4);
    assert_eq!(
        generate(&s, 100, 70_000).unwrap(),
        generate(&s, 100, 70_000).unwrap()
    );
    // A range read in two batches holds the rows of the whole range.
    let whole = spec(NexmarkTable::Auction, 1);
    let split = [all(&whole, 0, 500), all(&whole, 500, 1_000)];
    assert_eq!(
        concat_batches(&schema(NexmarkTable::Auction), &split).unwrap(),
        all(&whole, 0, 1_000)
    );
}

#[test]
fn partitions_hold_every_row_once() {
    let one = all(&spec(NexmarkTable::Auction, 1), 10, 5_000);
    let mut four = all(&spec(NexmarkTable::Auction, 4), 10, 5_000);
    assert_eq!(four.num_rows(), one.num_rows());
    // Auction ids are unique: order the partitions' rows by id.
    let ids = ints(&four, "id");
    let mut order: Vec<u32> = (0..ids.len() as u32).collect();
    order.sort_by_key(|&i| ids[i as usize]);
    let order = arrow_array::UInt32Array::from(order);
    four = arrow_select::take::take_record_batch(&four, &order).unwrap();
    assert_eq!(four, one);
    assert_eq!(ints(&one, "id")[0], 1010, "auction row 10 is auction 1010");
}

#[test]
fn tables_of_one_setting_see_one_world() {
    let events = 50_000;
    let people = all(
        &spec(NexmarkTable::Person, 1),
        0,
        rows_below(&spec(NexmarkTable::Person, 1), events),
    );
    let ids = ints(&people, "id");
    assert_eq!(ids, (1000..1000 + ids.len() as i64).collect::<Vec<_>>());
    let auctions = all(
        &spec(NexmarkTable::Auction, 2),
        0,
        rows_below(&spec(NexmarkTable::Auction, 1), events),
    );
    // Sellers are people: ones already created, or a few ahead (Nexmark's
    // person id lead of 10).
    let last = *ids.last().unwrap();
    let sellers = ints(&auctions, "seller");
    assert!(sellers.iter().all(|s| (1000..=last + 10).contains(s)));
    let known = sellers.iter().filter(|s| ids.contains(s)).count();
    assert!(
        known * 10 > sellers.len() * 9,
        "{known} of {}",
        sellers.len()
    );
    // Event times follow event numbers: event 0 (a person) at the base,
    // a million events a second.
    let times = people
        .column_by_name(EVENT_TIME)
        .unwrap()
        .as_primitive::<TimestampMillisecondType>();
    assert_eq!(times.value(0), DEFAULT_BASE_TIME_MS as i64);
    assert_eq!(times.value(ids.len() - 1), DEFAULT_BASE_TIME_MS as i64 + 50);
}

#[test]
fn chunks_are_bounded() {
    let s = spec(NexmarkTable::Bid, 1);
    let all = all_columns(s.table);
    let sizes: Vec<usize> = chunks(&s, 0, (0, 2 * CHUNK_ROWS + 5), &all)
        .map(|b| b.unwrap().num_rows())
        .collect();
    assert_eq!(sizes, vec![CHUNK_ROWS as usize, CHUNK_ROWS as usize, 5]);
}

#[test]
fn a_projection_builds_only_its_columns_with_the_same_values() {
    for table in [
        NexmarkTable::Person,
        NexmarkTable::Auction,
        NexmarkTable::Bid,
    ] {
        let s = spec(table, 2);
        let full: Vec<RecordBatch> = chunks(&s, 1, (0, 1000), &all_columns(table))
            .map(Result::unwrap)
            .collect();
        for columns in [vec![0], vec![1, 2], vec![0, 5, 6]] {
            let projected: Vec<RecordBatch> = chunks(&s, 1, (0, 1000), &columns)
                .map(Result::unwrap)
                .collect();
            let want: Vec<RecordBatch> =
                full.iter().map(|b| b.project(&columns).unwrap()).collect();
            assert_eq!(projected, want, "{} {columns:?}", table.as_str());
        }
    }
}
