"""etl_emulator's parts on their own, without serving."""
