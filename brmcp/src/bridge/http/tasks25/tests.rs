//! Hostile input to the 2025-11-25 form of tasks.
