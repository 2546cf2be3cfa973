use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};

use super::*;
use crate::sink::delta::Commit;
use crate::sink::delta_log::{self, Committed};
use crate::sink::temp_storage;

fn file(path: &str, size: u64) -> AddFile {
    AddFile {
        path: path.into(),
        partition_values: vec![],
        size,
        modification_time_ms: 1,
        num_records: 1,
    }
}

async fn commit_batch(storage: &Storage, version: u64, app: &str, files: &[AddFile]) {
    let c = Commit {
        created: None,
        files,
        app_id: app,
        batch: version,
        now_ms: 1,
    };
    let made = delta_log::commit(storage, version, c.encode())
        .await
        .unwrap();
    assert_eq!(made, Committed::Made);
}

#[test]
fn a_commits_changes_read_back_as_written() {
    let mut f = file("k=a b/part-1.q.parquet", 10);
    f.partition_values = vec![("k".into(), Some("a b".into()))];
    f.num_records = 7;
    let c = Commit {
        created: None,
        files: std::slice::from_ref(&f),
        app_id: "q",
        batch: 3,
        now_ms: 1,
    };
    let got = changes_of(c.encode().as_bytes(), "c").unwrap();
    assert_eq!((got.added, got.compacted_by), (vec![f.clone()], None));
    let merged = file("k=a b/part-2-c.parquet", 15);
    let text = encode(
        "q",
        std::slice::from_ref(&f),
        std::slice::from_ref(&merged),
        2,
    );
    let got = changes_of(text.as_bytes(), "c").unwrap();
    assert_eq!(got.removed, [f.path]);
    assert_eq!(got.added[0].path, merged.path);
    assert_eq!(got.compacted_by.as_deref(), Some("q"));
    assert!(text.contains("\"dataChange\":false") && !text.contains("\"txn\""));
}

#[test]
fn small_files_are_grouped_by_directory_up_to_the_target() {
    let files = [
        file("d=1/a", 10),
        file("d=2/b", 10),
        file("d=1/c", 30),
        file("d=1/big", 60),
        file("d=1/e", 30),
        file("d=3/lone", 5),
    ];
    let planned = plan(&files, 100);
    let groups: Vec<Vec<&str>> = planned
        .iter()
        .map(|g| g.iter().map(|f| f.path.as_str()).collect())
        .collect();
    // d=1: a, c, e fit 100 together (big is not small); d=2 and d=3 have
    // one small file each, left as they are.
    assert_eq!(groups, [vec!["d=1/a", "d=1/c", "d=1/e"]]);
    let many: Vec<AddFile> = (0..5).map(|i| file(&format!("f{i}"), 40)).collect();
    let sizes: Vec<usize> = plan(&many, 100).iter().map(Vec::len).collect();
    assert_eq!(
        sizes,
        [2, 2],
        "groups of at most the target; the last one alone stays"
    );
}

#[tokio::test]
async fn files_since_the_last_compaction_are_those_still_in_the_table() {
    let (_dir, storage) = temp_storage();
    commit_batch(&storage, 0, "q", &[file("a", 1), file("b", 1)]).await;
    let compaction = encode("q", &[file("a", 1), file("b", 1)], &[file("ab", 2)], 1);
    delta_log::commit(&storage, 1, compaction).await.unwrap();
    commit_batch(&storage, 2, "q", &[file("c", 1)]).await;
    commit_batch(&storage, 3, "q", &[file("d", 1)]).await;
    // Another query's compaction does not end the walk; its removes count.
    let other = encode("other", &[file("c", 1)], &[file("c2", 1)], 1);
    delta_log::commit(&storage, 4, other).await.unwrap();
    let got = added_since_compaction(&storage, "q").await.unwrap();
    let paths: Vec<&str> = got.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["d", "c2"]);
}

#[tokio::test]
async fn a_group_is_rewritten_into_one_file_with_every_row() {
    let (dir, storage) = temp_storage();
    let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
    let mut group = Vec::new();
    for (i, values) in [vec![1, 2], vec![3], vec![4, 5, 6]].into_iter().enumerate() {
        let n = values.len() as u64;
        let batch =
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(values))]).unwrap();
        let mut w = ArrowWriter::try_new(Vec::new(), schema.clone(), None).unwrap();
        w.write(&batch).unwrap();
        let bytes = w.into_inner().unwrap();
        let path = format!("d=x/part-{i}.parquet");
        std::fs::create_dir_all(dir.path().join("d=x")).unwrap();
        std::fs::write(dir.path().join(&path), &bytes).unwrap();
        let mut f = file(&path, bytes.len() as u64);
        f.partition_values = vec![("d".into(), Some("x".into()))];
        f.num_records = n;
        group.push(f);
    }
    let merged = rewrite(&storage, &group, 9, 5).await.unwrap();
    assert!(
        merged.path.starts_with("d=x/part-00000000000000000009-c"),
        "{}",
        merged.path
    );
    assert_eq!((merged.num_records, merged.modification_time_ms), (6, 5));
    assert_eq!(merged.partition_values, group[0].partition_values);
    let bytes = std::fs::read(dir.path().join(&merged.path)).unwrap();
    assert_eq!(bytes.len() as u64, merged.size);
    let rows: Vec<i64> = ParquetRecordBatchReaderBuilder::try_new(Bytes::from(bytes))
        .unwrap()
        .build()
        .unwrap()
        .flat_map(|b| {
            let b = b.unwrap();
            let v = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            v.values().to_vec()
        })
        .collect();
    assert_eq!(rows, [1, 2, 3, 4, 5, 6]);
}
