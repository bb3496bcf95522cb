"""Training the small models FlashChat drafts with (MTP heads; DFlash2 drafters later)."""
