//! A topic's concurrency as a semaphore that a reload can resize while
//! attempts hold permits: growing adds permits at once; shrinking takes the
//! free ones at once and the rest as running attempts return theirs. A
//! [`Slot`] is what one attempt holds: its topic's permit and a global one,
//! both given back when it is dropped.

use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Slots for one topic's running attempts.
pub(crate) struct Capacity {
    semaphore: Arc<Semaphore>,
    /// (configured size, permits still to be taken back when returned)
    state: Mutex<(u32, u32)>,
}

impl Capacity {
    pub fn new(size: u32) -> Arc<Capacity> {
        Arc::new(Capacity {
            semaphore: Arc::new(Semaphore::new(size as usize)),
            state: Mutex::new((size, 0)),
        })
    }

    /// Free slots now.
    pub fn available(&self) -> usize {
        self.semaphore.available_permits()
    }

    /// Take a slot if one is free.
    pub fn try_acquire(&self) -> Option<OwnedSemaphorePermit> {
        self.semaphore.clone().try_acquire_owned().ok()
    }

    /// A slot of this topic plus one of `global`, if both are free.
    pub fn slot(self: &Arc<Self>, global: &Arc<Semaphore>) -> Option<Slot> {
        let topic = self.try_acquire()?;
        let global = global.clone().try_acquire_owned().ok()?;
        Some(Slot {
            topic: Some(topic),
            _global: global,
            capacity: self.clone(),
        })
    }

    /// Give a slot back (or keep it, if the capacity shrank meanwhile).
    fn give_back(&self, permit: OwnedSemaphorePermit) {
        let mut state = self.state.lock().expect("capacity lock");
        if state.1 > 0 {
            state.1 -= 1;
            permit.forget();
        }
    }

    /// Change the size to `size`.
    pub fn resize(&self, size: u32) {
        let mut state = self.state.lock().expect("capacity lock");
        let (old, debt) = *state;
        if size > old {
            let grow = size - old;
            let repaid = grow.min(debt);
            self.semaphore.add_permits((grow - repaid) as usize);
            *state = (size, debt - repaid);
        } else {
            let shrink = old - size;
            let taken = self.semaphore.forget_permits(shrink as usize) as u32;
            *state = (size, debt + shrink - taken);
        }
    }
}

/// One running attempt's capacity: a slot of its topic and a global one,
/// returned on drop.
pub(crate) struct Slot {
    topic: Option<OwnedSemaphorePermit>,
    _global: OwnedSemaphorePermit,
    capacity: Arc<Capacity>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(permit) = self.topic.take() {
            self.capacity.give_back(permit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shrinking_below_what_runs_takes_slots_back_as_they_return() {
        let c = Capacity::new(3);
        let held: Vec<_> = (0..3).map(|_| c.try_acquire().unwrap()).collect();
        c.resize(1);
        assert_eq!(c.available(), 0);
        let mut held = held.into_iter();
        c.give_back(held.next().unwrap());
        c.give_back(held.next().unwrap());
        assert_eq!(c.available(), 0, "two returned slots are taken back");
        c.give_back(held.next().unwrap());
        assert_eq!(c.available(), 1);
        c.resize(4);
        assert_eq!(c.available(), 4);
        let one = c.try_acquire().unwrap();
        c.resize(2);
        assert_eq!(c.available(), 1);
        c.give_back(one);
        assert_eq!(c.available(), 2);
    }
}
