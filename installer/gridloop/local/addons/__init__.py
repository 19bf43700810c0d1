"""What `local up` puts into the cluster beside the control plane: upstream objects
applied (`applying`), Kueue's and agent-sandbox's (`kueue_manifests`,
`kueue_installing`, `sandbox_installing`), the object store (`object_store`), and the
wait for webhooks that fail closed (`webhook_waiting`)."""
