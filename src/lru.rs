//! A small least-recently-used map for wgconv's caches of compiled kernels: a bounded
//! list searched linearly (by a hash first), which for the few dozen entries they hold is
//! as fast as a linked hash map and keeps the library free of another dependency.

use std::collections::hash_map::DefaultHasher;
use std::collections::VecDeque;
use std::hash::{Hash, Hasher};

/// At most `capacity` entries; the least recently used one goes first.
#[derive(Debug)]
pub(crate) struct Lru<K, V> {
    capacity: usize,
    /// Oldest first; the hash of each key beside it.
    entries: VecDeque<(u64, K, V)>,
}

fn hash_of<K: Hash>(key: &K) -> u64 {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

impl<K: Hash + Eq, V: Clone> Lru<K, V> {
    /// An empty map of at most `capacity` (at least 1) entries.
    pub fn new(capacity: usize) -> Self {
        Lru { capacity: capacity.max(1), entries: VecDeque::new() }
    }

    /// The value of `key`, which becomes the most recently used.
    pub fn get(&mut self, key: &K) -> Option<V> {
        let h = hash_of(key);
        let i = self.entries.iter().position(|(eh, k, _)| *eh == h && k == key)?;
        let entry = self.entries.remove(i)?;
        let value = entry.2.clone();
        self.entries.push_back(entry);
        Some(value)
    }

    /// Inserts (or replaces) `key`, evicting the least recently used entries beyond the
    /// capacity.
    pub fn insert(&mut self, key: K, value: V) {
        let h = hash_of(&key);
        if let Some(i) = self.entries.iter().position(|(eh, k, _)| *eh == h && *k == key) {
            self.entries.remove(i);
        }
        self.entries.push_back((h, key, value));
        while self.entries.len() > self.capacity {
            self.entries.pop_front();
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_the_least_recently_used() {
        let mut lru = Lru::new(2);
        lru.insert("a", 1);
        lru.insert("b", 2);
        assert_eq!(lru.get(&"a"), Some(1)); // b is now the oldest
        lru.insert("c", 3);
        assert_eq!(lru.len(), 2);
        assert_eq!(lru.get(&"b"), None);
        assert_eq!(lru.get(&"a"), Some(1));
        assert_eq!(lru.get(&"c"), Some(3));
        lru.insert("c", 4);
        assert_eq!((lru.len(), lru.get(&"c")), (2, Some(4)));
    }
}
