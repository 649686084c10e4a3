"""Destination-passing style (DPS paper §3.4): DPS-F̃, D⟦e⟧r, alloc simplification, exact scratch sizes."""
