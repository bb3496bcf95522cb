"""Conversations in and out of the history: FlashChat JSON and Markdown exports, and imports
of FlashChat JSON, OpenAI-style message lists and ChatGPT's ``conversations.json``."""
