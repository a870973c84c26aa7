-- The system tenant owns Sluice's internal topics (the consumer groups'
-- offsets topic). Its name starts with '_', which tenant names cannot, and
-- it has no API keys. ListTenants leaves it out.

-- +goose Up
INSERT INTO tenants (id, name, email, plan, status, created_at)
VALUES ('00000000-0000-0000-0000-000000000001', '_system', '_system@sluice.internal', 'pro', 'active', 0);

-- +goose Down
DELETE FROM partitions WHERE topic_id IN (SELECT id FROM topics WHERE tenant_id = '00000000-0000-0000-0000-000000000001');
DELETE FROM topics WHERE tenant_id = '00000000-0000-0000-0000-000000000001';
DELETE FROM tenants WHERE id = '00000000-0000-0000-0000-000000000001';
