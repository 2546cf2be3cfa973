//! The queries of one term, by name, with lookup by name or id.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::error::DriverError;
use crate::query::entry::QueryEntry;

#[derive(Default)]
pub struct Queries {
    map: Mutex<BTreeMap<String, Arc<QueryEntry>>>,
    /// Serializes submissions so that a name is checked and claimed at once.
    pub submit_lock: tokio::sync::Mutex<()>,
}

impl Queries {
    /// The map. A poisoned lock is a bug: panic.
    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<QueryEntry>>> {
        self.map.lock().expect("query map lock poisoned")
    }

    /// Finds a query by name or id.
    pub fn find(&self, key: &str) -> Result<Arc<QueryEntry>, DriverError> {
        let map = self.map();
        if let Some(e) = map.get(key) {
            return Ok(e.clone());
        }
        map.values()
            .find(|e| e.id == key)
            .cloned()
            .ok_or_else(|| DriverError::NotFound(key.to_string()))
    }

    pub fn get(&self, name: &str) -> Option<Arc<QueryEntry>> {
        self.map().get(name).cloned()
    }

    pub fn list(&self) -> Vec<Arc<QueryEntry>> {
        self.map().values().cloned().collect()
    }

    pub fn insert(&self, entry: Arc<QueryEntry>) {
        self.map().insert(entry.name.clone(), entry);
    }
}
