"""rollsweep's studies: one package per paper, each exposing `STUDY`."""
