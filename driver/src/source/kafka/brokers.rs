//! What the driver asks the brokers: the partitions of the source's topics
//! and where each stands. One connection and its partition clients, kept
//! between batches; the submit check and the planner ask the same way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sluice_kafka::{Kafka, Partition};

use super::plan::Observed;

/// A topic the brokers do not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// Its index among the source's topics.
    pub index: usize,
    pub topic: String,
    /// The topics the brokers have.
    pub known: Vec<String>,
}

pub struct Brokers {
    kafka: Kafka,
    /// Where a partition ends: its last stable offset (`read_committed`)
    /// or its high watermark.
    read_committed: bool,
    clients: Mutex<HashMap<(String, i32), Arc<Partition>>>,
}

impl Brokers {
    pub fn new(kafka: Kafka, read_committed: bool) -> Self {
        Brokers {
            kafka,
            read_committed,
            clients: Mutex::new(HashMap::new()),
        }
    }

    pub fn servers(&self) -> &str {
        self.kafka.servers()
    }

    /// Every partition of `topics`, in order, with its offsets now; or the
    /// first topic that does not exist.
    pub async fn observe(
        &self,
        topics: &[String],
    ) -> sluice_common::Result<Result<Vec<Observed>, Missing>> {
        let listed = self.kafka.topics().await?;
        let mut wanted = Vec::new();
        for (index, topic) in topics.iter().enumerate() {
            match listed.get(topic) {
                Some(parts) if !parts.is_empty() => {
                    wanted.extend(parts.iter().map(|&p| (topic.clone(), p)));
                }
                _ => {
                    return Ok(Err(Missing {
                        index,
                        topic: topic.clone(),
                        known: listed.into_keys().collect(),
                    }));
                }
            }
        }
        let observed =
            futures::future::try_join_all(wanted.into_iter().map(|(topic, p)| async move {
                let client = self.partition(&topic, p).await?;
                let (earliest, latest) = futures::try_join!(client.earliest(), client.latest())?;
                Ok::<_, sluice_common::Error>(Observed {
                    topic,
                    partition: p,
                    earliest,
                    latest,
                })
            }))
            .await?;
        Ok(Ok(observed))
    }

    /// A client of one partition, kept for later calls.
    async fn partition(&self, topic: &str, p: i32) -> sluice_common::Result<Arc<Partition>> {
        let key = (topic.to_string(), p);
        if let Some(c) = self.clients().get(&key) {
            return Ok(c.clone());
        }
        let client = self.kafka.partition(topic, p, true).await?;
        let client = Arc::new(client.committed_only(self.read_committed));
        self.clients().insert(key, client.clone());
        Ok(client)
    }

    fn clients(&self) -> std::sync::MutexGuard<'_, HashMap<(String, i32), Arc<Partition>>> {
        self.clients
            .lock()
            .expect("kafka partition clients lock poisoned")
    }
}
