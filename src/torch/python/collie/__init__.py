"""collie: a collective-communication library. ``import collie.torch`` registers the "collie" backend of
torch.distributed, so that ``torch.distributed.init_process_group("collie")`` runs its collectives on collie."""
