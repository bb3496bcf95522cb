"""The model library: what is installed under ``paths.models_dir()``, and how models get there.

``sources`` turns a drop, a paste or a CLI argument into what it names (a hub repository, a
local folder, a GGUF file, MTP ``.safetensors`` files); ``hub`` inspects a repository before
anything is downloaded (is it something the engine runs, how big, how much memory);
``download`` fetches it resumably and verified into a staging folder and installs it
atomically; ``local`` installs local folders, GGUF files and MTP files the same way;
``catalog`` lists installed models with their pairings and removes them.
"""
