"""F̃ programs used as test inputs: each module has kernels and their numpy oracles (np_*)."""
