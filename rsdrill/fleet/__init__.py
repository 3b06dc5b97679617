"""Running safely across a fleet: a stop lever every run obeys and a lease that keeps one
experiment per cluster at a time, kept in a store the team shares (a SQLite file on one
machine, or a MongoDB the team already has). Records are signed with the fleet key, so a
caller who can write to the store but could not run an experiment cannot forge them."""
