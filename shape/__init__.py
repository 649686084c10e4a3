"""Shape translation S⟦e⟧ (DPS paper §3.3, Fig. 8), Shape-F̃ (Fig. 10) and symbolic sizes."""
